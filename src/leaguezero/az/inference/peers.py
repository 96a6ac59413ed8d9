"""Who is on the other end of a server connection, and which connections the server admits.

A *peer* is the unit the inference server's caps and fair shares count in: a user on a Unix
socket (``SO_PEERCRED``), and on TCP the remote address, except that a loopback connection is
its local user's (found in the kernel's socket table,
:func:`leaguezero.common.peers.loopback_uid`): every local user shares 127.0.0.1, and one user
can pick any of 127.0.0.0/8 as source, so neither would separate them. Where the user cannot be
found, the address is the peer.

:class:`PeerTable` holds the open connections by peer and decides who gets in
(:meth:`PeerTable.admit`): a connection that has not yet completed a frame (``proven`` False)
is the first to give way, so silent connections never lock anyone out; past the per-peer cap
the newcomer's own peer gives way or the newcomer is refused; past the global cap the largest
peer gives way when it holds more than the newcomer's would.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Protocol

from leaguezero.common.peers import loopback_uid, unix_peer_uid


def loopback_tcp_uid(sock: socket.socket) -> int | None:
    """The user id owning the other end of the accepted loopback TCP socket ``sock`` (the
    client's socket on this machine, :func:`leaguezero.common.peers.loopback_uid`), or None
    where the kernel does not say."""
    try:
        return loopback_uid(sock.getpeername(), sock.getsockname())
    except OSError:
        return None


def peer_of(sock: socket.socket | None) -> str:
    """The peer key of an accepted connection: ``uid:N`` (a Unix socket, or a loopback TCP
    connection whose user the kernel gives) or ``addr:HOST`` (a TCP connection otherwise)."""
    if sock is None:
        return "unknown"
    if sock.family == socket.AF_UNIX:
        uid = unix_peer_uid(sock)
        return "unknown" if uid is None else f"uid:{uid}"
    try:
        host = sock.getpeername()[0]
    except OSError:
        return "unknown"
    uid = loopback_tcp_uid(sock)  # None unless loopback (IPv4-mapped too) and the kernel says
    return f"addr:{host}" if uid is None else f"uid:{uid}"


class PeerConnection(Protocol):
    """What :class:`PeerTable` reads of a connection."""

    peer: str
    proven: bool  # it completed a frame
    last_frame: float  # when it last completed one (time.monotonic())


class PeerTable:
    """Open connections by peer, with the server's admission rule (see the module docstring).

    Args:
        max_connections: most connections over all peers.
        max_per_peer: most connections of one peer.
    """

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        self.max_connections = max_connections
        self.max_per_peer = max(1, min(max_per_peer, max_connections))
        self.by_peer: dict[str, set[PeerConnection]] = {}
        self.count = 0

    def __iter__(self):
        for conns in self.by_peer.values():
            yield from conns

    def admit(self, conn: PeerConnection) -> list[PeerConnection] | None:
        """Whether ``conn`` may join: the connections to close first to make room for it (often
        none), or None to refuse it. Call :meth:`add` after closing them."""
        own = self.by_peer.get(conn.peer, set())
        if len(own) >= self.max_per_peer:
            victim = _unproven_oldest(own)
            return None if victim is None else [victim]
        if self.count < self.max_connections:
            return []
        victim = _unproven_oldest(self)
        if victim is not None:
            return [victim]
        largest = max(self.by_peer.values(), key=len)
        if len(largest) > len(own) + 1:  # the newcomer's peer would still hold fewer
            return [min(largest, key=lambda c: c.last_frame)]  # the longest silent
        return None

    def add(self, conn: PeerConnection) -> None:
        self.by_peer.setdefault(conn.peer, set()).add(conn)
        self.count += 1

    def discard(self, conn: PeerConnection) -> None:
        conns = self.by_peer.get(conn.peer)
        if conns is None or conn not in conns:
            return
        conns.discard(conn)
        self.count -= 1
        if not conns:
            del self.by_peer[conn.peer]

    def peers(self) -> dict[str, int]:
        """Open connections per peer."""
        return {peer: len(conns) for peer, conns in self.by_peer.items()}


def _unproven_oldest(conns: Iterable[PeerConnection]) -> PeerConnection | None:
    """The connection that has said nothing for longest (opened first), or None."""
    silent = [c for c in conns if not c.proven]
    return min(silent, key=lambda c: c.last_frame) if silent else None
