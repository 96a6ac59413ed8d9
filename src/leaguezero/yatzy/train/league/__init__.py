"""League training for Yatzy: ``yz run --league`` around the AlphaZero loop (:mod:`.run`), league
self-play against sampled opponents (:mod:`.play`), and league entries as agents with the
tournament the evaluator runs (:mod:`.agents`).
"""
