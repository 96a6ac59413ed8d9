"""Live games of the web app, kept per browser session, bounded in number and expired when idle.

**Sessions are the server's to issue.** A session id is a random token and its HMAC under a key
drawn when the process starts (:class:`SessionKeys`); a cookie the server did not sign (chosen by
the client, forged, or from before a restart) is replaced by a fresh id, so a client cannot pick
its sessions, nor name another's.

**Games.** A game is found by ``(session, game id)``: a game id is a fresh random token, so a
game id seen by another session finds nothing (404), and nobody can guess one. A game idle for
``ttl_s`` seconds is dropped. The bounds, checked in this order when a game is added:

1. a session holds at most ``per_session`` games: its new one replaces its own least recently
   used;
2. a client (the local user over loopback, else the peer's address: :func:`client_of`) holds
   games in at most ``per_client_sessions`` sessions and at most ``client_share`` of the store:
   beyond, its new game takes the place of one of its own idle games (or its session's own),
   else it is refused;
3. the store holds at most ``max_games``: when full, a new game takes the place of the least
   recently used game idle for ``evict_idle_s``, of any session; only when none is that idle,
   the session's own least recently used; otherwise it is refused (:class:`StoreFull`).

So one client, however many sessions it opens, leaves the other clients most of the store, and
nobody pushes out a game someone is playing (a new game of one's own included, while another
session's game idles).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leaguezero.common.peers import loopback_uid
from leaguezero.web.limits import (
    CLIENT_SHARE,
    EVICT_IDLE_S,
    MAX_GAMES_PER_SESSION,
    MAX_SESSIONS_PER_CLIENT,
)

_TOKEN_BYTES = 18  # 144 random bits: a session id nobody guesses
_SIGNATURE_CHARS = 22  # 132 bits of the HMAC-SHA256


class SessionKeys:
    """Issues session ids and tells the issued ones apart: ``token.signature``, the signature an
    HMAC-SHA256 of the token under a key of this process (never written anywhere)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _sign(self, token: str) -> str:
        digest = hmac.new(self._key, token.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii")[:_SIGNATURE_CHARS]

    def issue(self) -> str:
        """A fresh session id."""
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        return f"{token}.{self._sign(token)}"

    def verify(self, session: str) -> bool:
        """Whether ``session`` is an id this process issued (constant-time comparison)."""
        token, dot, signature = session.partition(".")
        if not dot or len(session) > 80 or not token.isascii() or not signature.isascii():
            return False
        return hmac.compare_digest(self._sign(token), signature)


def session_of(request: Any) -> str:
    """The session id the app's middleware put on ``request`` (issued by this server)."""
    return request.state.session


def client_of(request: Any) -> str:
    """Who sent ``request``, for the per-client bounds: the local user owning the client's
    socket when it connects over loopback (``uid N``: every local user shares the loopback
    addresses, and may pick any of 127/8), else the peer's address."""
    if request.client is None:
        return "unknown"
    host, port = request.client
    server = request.scope.get("server")
    if server and _is_loopback(host):
        uid = peer_uid((host, port), (server[0], server[1]))
        if uid is not None:
            return f"uid {uid}"
    return host


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client end of a loopback TCP connection ``client -> server``
    (:func:`leaguezero.common.peers.loopback_uid`); None where the kernel cannot tell."""
    return loopback_uid(client, server)


class GameNotFound(LookupError):
    """No live game with this id in this session (never existed, expired, or someone else's)."""


class StoreFull(RuntimeError):
    """No room for a new game without pushing out one in play; the message says which bound."""


@dataclass
class _Entry:
    seen: float  # the clock's time of the game's last use
    game: Any
    client: str | None  # None: not counted per client (a caller that knows no peer)


class GameStore:
    """Thread-safe ``(session, id) -> game`` map with the bounds of the module docstring.

    Args:
        max_games: how many live games the whole app keeps (all sessions together).
        ttl_s: seconds a game may stay idle before it is dropped.
        per_session: how many games one session may hold.
        evict_idle_s: how long a game must be idle before a new game of another session may
            take its place.
        per_client_sessions: in how many sessions one client may hold games.
        client_share: the share of ``max_games`` one client may hold (at least one game).
        clock: time source (``time.monotonic``), injectable for tests.
    """

    def __init__(
        self,
        max_games: int = 32,
        ttl_s: float = 3600.0,
        per_session: int = MAX_GAMES_PER_SESSION,
        evict_idle_s: float = EVICT_IDLE_S,
        per_client_sessions: int = MAX_SESSIONS_PER_CLIENT,
        client_share: float = CLIENT_SHARE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_games < 1:
            raise ValueError(f"max_games must be at least 1, got {max_games}")
        if per_session < 1 or per_client_sessions < 1:
            raise ValueError("per_session and per_client_sessions must be at least 1")
        self.max_games = max_games
        self.per_session = per_session
        self.per_client_sessions = per_client_sessions
        self.per_client_games = max(1, int(max_games * client_share))
        self.evict_idle_s = evict_idle_s
        self.ttl_s = ttl_s
        self._clock = clock
        self._games: OrderedDict[tuple[str, str], _Entry] = OrderedDict()  # oldest use first
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for key in [k for k, entry in self._games.items() if now - entry.seen > self.ttl_s]:
            del self._games[key]

    def _idle(self, key: tuple[str, str], now: float) -> bool:
        return now - self._games[key].seen >= self.evict_idle_s

    def add(self, session: str, game: Any, client: str | None = None) -> str:
        """Keep ``game`` for ``session`` of ``client`` and return its new id.

        Raises :class:`StoreFull` when a bound of the module docstring leaves no room.
        """
        game_id = secrets.token_urlsafe(12)
        with self._lock:
            now = self._clock()
            self._expire(now)
            for key in self._victims(session, client, now):
                del self._games[key]
            self._games[(session, game_id)] = _Entry(now, game, client)
        return game_id

    def check_room(self, session: str, client: str | None = None) -> None:
        """Raise :class:`StoreFull` now if :meth:`add` would (before a game is built for
        nothing); a game added meanwhile by another request may still fill the room."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            self._victims(session, client, now)

    def _victims(self, session: str, client: str | None, now: float) -> list[tuple[str, str]]:
        """The games a new game of ``session`` (of ``client``) takes the place of, by the bounds
        of the module docstring in their order; raises :class:`StoreFull`. Changes nothing."""
        gone: list[tuple[str, str]] = []
        kept = [key for key in self._games]  # oldest use first

        def drop(key: tuple[str, str]) -> None:
            gone.append(key)
            kept.remove(key)

        def idle(keys: list[tuple[str, str]]) -> tuple[str, str] | None:
            return next((key for key in keys if self._idle(key, now)), None)

        own = [key for key in kept if key[0] == session]
        if len(own) >= self.per_session:  # bound 1
            drop(own.pop(0))
        if client is not None:  # bound 2
            theirs = [key for key in kept if self._games[key].client == client]
            sessions = list(dict.fromkeys(key[0] for key in theirs))
            if not own and len(sessions) >= self.per_client_sessions:
                # a new session of a client at its bound: one of its sessions idle throughout
                quiet = [
                    s for s in sessions if all(self._idle(k, now) for k in theirs if k[0] == s)
                ]
                if not quiet:
                    raise StoreFull(
                        f"this client holds games in {len(sessions)} sessions, all in play: try "
                        "again later, or go on in a session you have"
                    )
                for key in [k for k in theirs if k[0] == quiet[0]]:
                    drop(key)
                    theirs.remove(key)
            if len(theirs) >= self.per_client_games:
                victim = idle(theirs) or (own[0] if own else None)
                if victim is None:
                    raise StoreFull(
                        f"this client holds {len(theirs)} of the server's {self.max_games} "
                        "games, all in play: try again later"
                    )
                if victim in own:
                    own.remove(victim)
                drop(victim)
        while len(kept) >= self.max_games:  # bound 3
            victim = idle(kept) or (own.pop(0) if own else None)
            if victim is None:
                raise StoreFull(
                    f"the server holds its {self.max_games} games, all in play: try again "
                    "later (leaguezero web --max-games raises the bound)"
                )
            if victim in own:
                own.remove(victim)
            drop(victim)
        return gone

    def get(self, session: str, game_id: str) -> Any:
        """The game ``game_id`` of ``session``; raises :class:`GameNotFound` otherwise."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            entry = self._games.get((session, game_id))
            if entry is None:
                raise GameNotFound(f"no live game {game_id!r} in this session (expired?)")
            entry.seen = now
            self._games.move_to_end((session, game_id))
            return entry.game

    def __len__(self) -> int:
        with self._lock:
            return len(self._games)
