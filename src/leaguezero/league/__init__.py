"""League training, game-agnostic: registry, schedule, ratings, PFSP matchmaking, evaluator."""
