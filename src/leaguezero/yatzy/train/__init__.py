"""The training pipeline: what each search kind trains and plays in self-play (:mod:`.kinds`;
the networks are :mod:`leaguezero.yatzy.net`), the AlphaZero loop (:mod:`.loop`) and runs
started from a trained network (:mod:`.lineage`), with the tools around a run
(:mod:`.profiling`, :mod:`.report`). The parts, one sub-package each: :mod:`.selfplay` (the slot
loop, both searches' heroes, position evaluation, worker processes), :mod:`.evaluation` (oracle
statistics, gating) and :mod:`.league` (``yz run --league``). The Ray backend lives in
``yatzy/cli/ray_backend.py``: only a game's command-line layer may import
``leaguezero.distributed`` (tests/test_architecture.py).
"""
