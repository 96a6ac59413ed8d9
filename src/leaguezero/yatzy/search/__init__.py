"""How a network plays a decision: PUCT search with chance nodes (:mod:`.puct`), the
exact in-turn dynamic programme (:mod:`.turn_dp`) and the turn search built on it
(:mod:`.turn`), and the one typed settings object every command builds them from."""
