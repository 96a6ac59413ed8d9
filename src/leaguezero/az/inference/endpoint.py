"""Inference endpoints: ``unix:///path/to.sock`` and ``tcp://host:port`` addresses.

:func:`parse_endpoints` accepts a comma-separated list: the client spreads requests over
several servers (one per GPU) and fails over between them (docs/cluster.md).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from dataclasses import dataclass
from typing import Literal


class EndpointError(ValueError):
    """An address that is not ``unix:///path`` or ``tcp://host:port``."""


class BindError(RuntimeError):
    """A server address that cannot (or must not) be bound; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    scheme: Literal["unix", "tcp"]
    path: str = ""  # unix: socket file path
    host: str = ""  # tcp: host name or IP literal
    port: int = 0  # tcp: port (0 = any free port, for servers)

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        """True for Unix sockets and TCP hosts that only this machine can reach."""
        if self.scheme == "unix" or self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a DNS name: assume it can be reached from elsewhere


def parse_endpoint(text: str) -> Endpoint:
    """Parse one address.

    Raises:
        EndpointError: with a message showing the accepted forms.
    """
    text = text.strip()
    forms = "use unix:///path/to.sock or tcp://HOST:PORT"
    if text.startswith("unix://"):
        path = text[len("unix://") :]
        if not path.startswith("/"):
            raise EndpointError(f"unix endpoint {text!r} needs an absolute path; {forms}")
        return Endpoint("unix", path=path)
    if text.startswith("tcp://"):
        rest = text[len("tcp://") :]
        host, sep, port_text = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # [::1]:5000
        if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
            raise EndpointError(f"tcp endpoint {text!r} needs a host and a port 0..65535; {forms}")
        return Endpoint("tcp", host=host, port=int(port_text))
    raise EndpointError(f"endpoint {text!r} has an unknown scheme; {forms}")


def parse_endpoints(text: str) -> list[Endpoint]:
    """Parse a comma-separated list of addresses (at least one)."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise EndpointError("no endpoint given; use unix:///path/to.sock or tcp://HOST:PORT")
    return [parse_endpoint(p) for p in parts]


def connect(endpoint: Endpoint, timeout_s: float | None = 5.0) -> socket.socket:
    """A connected blocking stream socket (``TCP_NODELAY`` on TCP; small frames go out at once).

    Raises:
        OSError: when nothing listens at ``endpoint``.
    """
    if endpoint.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: object = endpoint.path
    else:
        family = socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = (endpoint.host, endpoint.port)
    try:
        sock.settimeout(timeout_s)
        sock.connect(target)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_unix_owner_only(path: str) -> socket.socket:
    """A bound, owner-only (0o600) Unix socket at ``path``; a stale socket file is removed first.

    Raises:
        BindError: the path is a live server's socket, a non-socket file, or cannot be bound.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        if not stat.S_ISSOCK(mode):
            raise BindError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # nobody listens: a leftover from a killed server
        else:
            raise BindError(f"another server is listening on unix://{path}; stop it first")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the file is created 0o600: no window where others can connect
    try:
        sock.bind(path)
    except OSError as err:
        sock.close()
        raise BindError(f"cannot bind unix://{path}: {err.strerror}") from None
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    return sock
