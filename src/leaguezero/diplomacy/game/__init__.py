"""The game itself, with no learning in it: the engine wrapper (env), map facts, scoring,
the board features, the scripted bots, who plays a seat (seats), one game (rollout) and a
rated round of games (tournament).

Nothing here imports from ``agents/``, ``train/``, ``llm/`` or the commands.
"""
