"""Self-play: the game-slot loop both search kinds share (:mod:`.slots`), the PUCT hero
(:mod:`.puct`) and the turn search's (:mod:`.turn`, with the board-tower values of
:mod:`leaguezero.yatzy.net.tower_values`), what evaluates positions (:mod:`.positions`: the net
in process or an inference server) and the worker processes (:mod:`.workers`).
"""
