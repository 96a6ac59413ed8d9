"""Who is at the other end of a local connection: the servers' unit of fair shares and caps.

Every local user shares 127.0.0.1, and any of them may bind any address of 127.0.0.0/8 as a
source, so on loopback an address separates nobody; the kernel knows the user owning the
client's socket. :func:`loopback_uid` finds it in Linux's socket table (``/proc/net/tcp`` and
``tcp6``: the row whose local address is the client's and remote the server's), and
:func:`unix_peer_uid` reads ``SO_PEERCRED``. Both give None where the kernel does not say (not
Linux, not loopback, the connection already gone): callers then fall back to the address.
Used by the inference server (:mod:`leaguezero.az.inference.peers`), ``llm serve``'s compile
workers and the web app's game store.
"""

from __future__ import annotations

import ipaddress
import socket
import struct


def _proc_address(host: str, port: int) -> str:
    """``host:port`` as ``/proc/net/tcp{,6}`` spells it: each 32-bit word of the address in
    host order, in hex, then the port."""
    packed = ipaddress.ip_address(host).packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def _plain(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address without an IPv6 scope, an IPv4-mapped one as IPv4 (a dual-stack socket
    reports an IPv4 client as ``::ffff:127.0.0.1``; the client's own socket is IPv4)."""
    address = ipaddress.ip_address(host.partition("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def loopback_uid(client: tuple, server: tuple) -> int | None:
    """The uid owning the client end of the loopback TCP connection ``client -> server``
    (``(host, port, ...)`` as ``getpeername`` / ``getsockname`` give them), or None."""
    try:
        near, far = _plain(str(client[0])), _plain(str(server[0]))
        if not near.is_loopback:
            return None
        table = "/proc/net/tcp6" if near.version == 6 else "/proc/net/tcp"
        local = _proc_address(str(near), int(client[1]))
        remote = _proc_address(str(far), int(server[1]))
        with open(table, encoding="ascii") as rows:
            next(rows)  # the header
            for row in rows:
                fields = row.split()
                if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                    return int(fields[7])
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    return None


def unix_peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end of the Unix socket ``sock``, or None."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", creds)[1]
