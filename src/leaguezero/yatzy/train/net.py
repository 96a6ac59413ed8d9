"""Temporary re-export (issue 56): the networks moved to :mod:`leaguezero.yatzy.net.networks`.

Only ``yatzy/cli/infer.py`` still imports from here (it was being edited elsewhere while the
networks moved); once it imports :mod:`leaguezero.yatzy.net.networks`, delete this module.
"""

from __future__ import annotations

from leaguezero.yatzy.net.networks import build_net

__all__ = ["build_net"]
