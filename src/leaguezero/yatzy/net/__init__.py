"""The Yatzy networks and what each search kind's network reads: the residual MLP and the
board-tower net (:mod:`.networks`), the board-tower net's value-only forward for the turn search
(:mod:`.tower_values`), and each kind's feature schema, input width and checkpoint schema ids
(:mod:`.schema`). Below the searches, agents and training: it imports only the game and the
config."""
