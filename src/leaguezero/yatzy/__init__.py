"""2-player Scandinavian Yatzy: oracle-compatible rules, dice, features, bots, oracle, CLI."""
