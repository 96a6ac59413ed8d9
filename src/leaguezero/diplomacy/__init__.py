"""No-press Diplomacy for league training: engine wrapper, bots, scoring, rollouts, tournaments.

Needs the optional extra ``diplomacy`` (``pip install 'leaguezero[diplomacy]'``); the engine is
the DATC-compliant ``diplomacy`` package, licensed AGPL-3.0.
"""
