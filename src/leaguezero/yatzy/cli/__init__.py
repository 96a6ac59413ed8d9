"""The ``yz`` command line (= ``leaguezero yatzy``): the typer app (:mod:`.app`) and one module
per group of commands. The only layer of ``yatzy/`` that chooses a backend (local processes or
Ray) and hands it to the training code."""
