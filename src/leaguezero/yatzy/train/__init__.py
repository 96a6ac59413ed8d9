"""The training pipeline: the network and what each search kind needs (:mod:`.net`,
:mod:`.kinds`), self-play for both searches and its worker processes, the AlphaZero loop
(:mod:`.loop`), gating, the oracle evaluation, the league run with its self-play and evaluator,
profiling and the HTML report."""
