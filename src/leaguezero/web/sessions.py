"""Live games of the web app, kept per browser session, bounded in number and expired when idle.

A game is found by ``(session, game id)``: a browser's session id comes from its cookie and a
game id is a fresh random token, so a game id seen by another session finds nothing (404), and
nobody can guess one. A game idle for ``ttl_s`` seconds is dropped. Two bounds: a session
holds at most ``per_session`` games (its new one evicts its own least recently used), and the
store at most ``max_games``. When it is full, a new game evicts the session's own least recently
used game if it has one, and a game of another session only
if that one has been idle for ``evict_idle_s`` (the least recently used of the session holding
the most); otherwise the new game is refused (:class:`StoreFull`), so nobody, however many
sessions they open, can push out a game someone is playing.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from leaguezero.web.limits import EVICT_IDLE_S, MAX_GAMES_PER_SESSION


def session_of(request: Any) -> str:
    """The session id the app's middleware put on ``request`` (from the browser's cookie)."""
    return request.state.session


class GameNotFound(LookupError):
    """No live game with this id in this session (never existed, expired, or someone else's)."""


class StoreFull(RuntimeError):
    """Every slot holds a game played in the last ``evict_idle_s``; the message says so."""


class GameStore:
    """Thread-safe ``(session, id) -> game`` map with LRU eviction and idle expiry.

    Args:
        max_games: how many live games the whole app keeps (all sessions together).
        per_session: how many of them one session may hold.
        evict_idle_s: how long another session's game must be idle before a new game may
            take its place in a full store.
        ttl_s: seconds a game may stay idle before it is dropped.
        clock: time source (``time.monotonic``), injectable for tests.
    """

    def __init__(
        self,
        max_games: int = 32,
        ttl_s: float = 3600.0,
        per_session: int = MAX_GAMES_PER_SESSION,
        evict_idle_s: float = EVICT_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_games < 1:
            raise ValueError(f"max_games must be at least 1, got {max_games}")
        if per_session < 1:
            raise ValueError(f"per_session must be at least 1, got {per_session}")
        self.max_games = max_games
        self.per_session = per_session
        self.evict_idle_s = evict_idle_s
        self.ttl_s = ttl_s
        self._clock = clock
        self._games: OrderedDict[tuple[str, str], tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for key in [k for k, (seen, _) in self._games.items() if now - seen > self.ttl_s]:
            del self._games[key]

    def add(self, session: str, game: Any) -> str:
        """Keep ``game`` for ``session`` and return its new id; raises :class:`StoreFull`."""
        game_id = secrets.token_urlsafe(12)
        with self._lock:
            now = self._clock()
            self._expire(now)
            own = [key for key in self._games if key[0] == session]  # oldest use first
            while len(own) >= self.per_session:
                del self._games[own.pop(0)]
            while len(self._games) >= self.max_games:
                del self._games[own.pop(0) if own else self._victim(now)]
            self._games[(session, game_id)] = (now, game)
        return game_id

    def _victim(self, now: float) -> tuple[str, str]:
        """The least recently used of the games idle for ``evict_idle_s``, from the session
        holding the most games; raises :class:`StoreFull` when no game is that idle."""
        idle = [key for key, (seen, _) in self._games.items() if now - seen >= self.evict_idle_s]
        if not idle:
            raise StoreFull(
                f"the server holds its {self.max_games} games, all in play: try again later "
                "(leaguezero web --max-games raises the bound)"
            )
        held = Counter(session for session, _ in self._games)
        return max(idle, key=lambda key: held[key[0]])  # max keeps the first (LRU) of a tie

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
