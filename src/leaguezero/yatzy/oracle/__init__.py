"""The exact solitaire oracle: the solved ``yatzy-solver`` table behind our conventions
(:mod:`.solver`), the numba kernels that play and score with it (:mod:`.dp`), per-decision
diagnostics (regret, mistakes) and an inference evaluator backed by oracle values. Depends only
on :mod:`leaguezero.yatzy.game`."""
