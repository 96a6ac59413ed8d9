"""Game-agnostic utilities: config, events, atomic file io, seeding."""
