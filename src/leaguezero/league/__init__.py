"""League training, game-agnostic: registry, schedule, ratings, PFSP matchmaking, evaluator.

"The design" in this package's docstrings is the league design summarised in
docs/reference/design.md (the original league-training specification, in our words).
"""
