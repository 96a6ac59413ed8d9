"""Live games of the web app, kept per browser session, bounded in number and expired when idle.

A game is found by ``(session, game id)``: a browser's session id comes from its cookie and a
game id is a fresh random token, so a game id seen by another session finds nothing (404), and
nobody can guess one. A game idle for ``ttl_s`` seconds is dropped. Two bounds: a session
holds at most ``per_session`` games (its new one evicts its own least recently used), and the
store at most ``max_games``: a new game then evicts the least recently used game of the session
holding the most, so one browser (or a script with many sessions) gives way before a person
with one game does.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from leaguezero.web.limits import MAX_GAMES_PER_SESSION


def session_of(request: Any) -> str:
    """The session id the app's middleware put on ``request`` (from the browser's cookie)."""
    return request.state.session


class GameNotFound(LookupError):
    """No live game with this id in this session (never existed, expired, or someone else's)."""


class GameStore:
    """Thread-safe ``(session, id) -> game`` map with LRU eviction and idle expiry.

    Args:
        max_games: how many live games the whole app keeps (all sessions together).
        per_session: how many of them one session may hold.
        ttl_s: seconds a game may stay idle before it is dropped.
        clock: time source (``time.monotonic``), injectable for tests.
    """

    def __init__(
        self,
        max_games: int = 32,
        ttl_s: float = 3600.0,
        per_session: int = MAX_GAMES_PER_SESSION,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_games < 1:
            raise ValueError(f"max_games must be at least 1, got {max_games}")
        if per_session < 1:
            raise ValueError(f"per_session must be at least 1, got {per_session}")
        self.max_games = max_games
        self.per_session = per_session
        self.ttl_s = ttl_s
        self._clock = clock
        self._games: OrderedDict[tuple[str, str], tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for key in [k for k, (seen, _) in self._games.items() if now - seen > self.ttl_s]:
            del self._games[key]

    def add(self, session: str, game: Any) -> str:
        """Keep ``game`` for ``session`` and return its new id."""
        game_id = secrets.token_urlsafe(12)
        with self._lock:
            now = self._clock()
            self._expire(now)
            own = [key for key in self._games if key[0] == session]  # oldest use first
            while len(own) >= self.per_session:
                del self._games[own.pop(0)]
            while len(self._games) >= self.max_games:
                del self._games[self._victim()]
            self._games[(session, game_id)] = (now, game)
        return game_id

    def _victim(self) -> tuple[str, str]:
        """The least recently used game of the session holding the most games."""
        held = Counter(session for session, _ in self._games)
        most = max(held.values())
        return next(key for key in self._games if held[key[0]] == most)

    def get(self, session: str, game_id: str) -> Any:
        """The game ``game_id`` of ``session``; raises :class:`GameNotFound` otherwise."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            entry = self._games.get((session, game_id))
            if entry is None:
                raise GameNotFound(f"no live game {game_id!r} in this session (expired?)")
            self._games[(session, game_id)] = (now, entry[1])
            self._games.move_to_end((session, game_id))
            return entry[1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._games)
