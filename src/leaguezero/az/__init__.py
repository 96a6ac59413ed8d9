"""Game-agnostic AlphaZero parts: search, inference (protocol, server, client), replay, training,
gating. Nothing here imports a game package; games plug in through small protocols."""
