"""leaguezero: self-play reinforcement learning for games.

AlphaZero for 2-player Scandinavian Yatzy (``leaguezero.yatzy`` + ``leaguezero.az``) and league
training (``leaguezero.league``) used by Yatzy and 7-player no-press Diplomacy.
"""

__version__ = "0.1.0"
