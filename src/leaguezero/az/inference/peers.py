"""Who is on the other end of a server connection, and which connections the server admits.

A *peer* is the unit the inference server's caps and fair shares count in: a user on a Unix
socket (``SO_PEERCRED``), and on TCP the remote address, except that a loopback connection is
its local user's (found with the kernel's socket diagnostics, ``NETLINK_SOCK_DIAG``, as ``ss -e``
does): every local user shares 127.0.0.1, and one user can pick any of 127.0.0.0/8 as source,
so neither would separate them. Where the user cannot be found, the address is the peer.

:class:`PeerTable` holds the open connections by peer and decides who gets in
(:meth:`PeerTable.admit`): a connection that has not yet completed a frame (``proven`` False)
is the first to give way, so silent connections never lock anyone out; past the per-peer cap
the newcomer's own peer gives way or the newcomer is refused; past the global cap the largest
peer gives way when it holds more than the newcomer's would.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable
from typing import Protocol

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_DIAG_REQ = struct.Struct("=BBBBI")  # family, protocol, ext, pad, states
_DIAG_MSG_HEAD = 4 + 48  # family, state, timer, retrans; inet_diag_sockid
_DIAG_MSG_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode


def _address16(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host).ljust(16, b"\0")


def loopback_tcp_uid(sock: socket.socket) -> int | None:
    """The user id owning the other end of the accepted loopback TCP socket ``sock`` (the
    client's socket on this machine), or None where the kernel does not say."""
    try:
        peer, local = sock.getpeername(), sock.getsockname()
        family = sock.family
        # inet_diag_sockid of the client's socket: its source is our peer, its destination us.
        sockid = struct.pack("!HH", peer[1], local[1])
        sockid += _address16(family, peer[0]) + _address16(family, local[0])
        sockid += struct.pack("=III", 0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)
        request = _DIAG_REQ.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
        header = _NLMSG.pack(_NLMSG.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0)
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as netlink:
            netlink.settimeout(1.0)
            netlink.sendto(header + request, (0, 0))
            answer = netlink.recv(8192)
        _, kind, _, _, _ = _NLMSG.unpack_from(answer)
        if kind != SOCK_DIAG_BY_FAMILY:
            return None  # NLMSG_ERROR: no such socket (it closed) or no diagnostics here
        return _DIAG_MSG_TAIL.unpack_from(answer, _NLMSG.size + _DIAG_MSG_HEAD)[3]
    except (OSError, ValueError, struct.error, AttributeError):
        return None  # not Linux, or no sock_diag in this kernel


def unix_peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end of the Unix socket ``sock``, or None."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", creds)[1]


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
    if ipaddress.ip_address(host.split("%")[0]).is_loopback:
        uid = loopback_tcp_uid(sock)
        if uid is not None:
            return f"uid:{uid}"
    return f"addr:{host}"


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
