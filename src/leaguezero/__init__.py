"""leaguezero: self-play reinforcement learning for games.

AlphaZero for 2-player Scandinavian Yatzy (``leaguezero.yatzy`` + ``leaguezero.az``) and league
training (``leaguezero.league``) used by Yatzy and 7-player no-press Diplomacy.
"""

from leaguezero.common.memory import bound_native_caches

__version__ = "0.1.0"

bound_native_caches()  # before any torch primitive is built: leaguezero.common.memory says why
