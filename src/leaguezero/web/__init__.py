"""``leaguezero web``: a local web app to play Yatzy, watch and play Diplomacy on the map, and
follow runs. Game internals are imported only by the adapters :mod:`.yatzy_games` and
:mod:`.diplomacy_games`; :mod:`.app` builds the FastAPI app, :mod:`.sessions` keeps live games."""
