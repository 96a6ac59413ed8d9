"""Inference endpoints: ``unix://NAME.sock``, ``unix:///path/to.sock`` and ``tcp://host:port``.

A Unix address with a bare file name (``unix://yatzy.sock``, the default) lives in this user's
private runtime directory (:func:`runtime_dir`: ``$XDG_RUNTIME_DIR/leaguezero`` when that is a
directory only this user can use, else ``~/.leaguezero/run``, created ``0o700``), so no other
user can create it first. A server refuses a socket path owned by another user; a client checks
who serves a Unix socket (``SO_PEERCRED``) and refuses one served by another user before it
sends anything (:class:`UntrustedSocketError`).

:func:`parse_endpoints` accepts a comma-separated list: the client spreads requests over
several servers (one per GPU) and fails over between them (docs/guides/cluster.md).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


class EndpointError(ValueError):
    """An address that is not ``unix:///path`` or ``tcp://host:port``."""


class BindError(RuntimeError):
    """A server address that cannot (or must not) be bound; the message says why."""


class UntrustedSocketError(ConnectionError):
    """A Unix socket served by another user: nothing is sent to it (it could capture the admin
    token or answer with poisoned evaluations)."""


def _private_dir_problem(path: Path) -> str:
    """Why ``path`` is not a directory only this user can use ("" when it is)."""
    try:
        info = os.lstat(path)
    except OSError as err:
        return f"{path} cannot be read ({err.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {info.st_uid})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"{path} can be used by other users; run  chmod 700 {path}"
    return ""


def runtime_dir() -> Path:
    """This user's directory for socket files (it may not exist yet; :func:`ensure_private_dir`).

    ``$XDG_RUNTIME_DIR/leaguezero`` when ``$XDG_RUNTIME_DIR`` is a private directory of this
    user (as systemd makes it), else ``~/.leaguezero/run``.
    """
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and not _private_dir_problem(Path(xdg)):
        return Path(xdg) / "leaguezero"
    return Path.home() / ".leaguezero" / "run"


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and its parents) owner-only; refuse one that others can use.

    Raises:
        BindError: ``path`` exists but is not a directory of this user with mode 0o700.
    """
    old_umask = os.umask(0o077)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        raise BindError(f"cannot create the socket directory {path}: {err.strerror}") from None
    finally:
        os.umask(old_umask)
    problem = _private_dir_problem(path)
    if problem:
        raise BindError(f"refusing to put a socket in {path}: {problem}")


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
    forms = "use unix://NAME.sock, unix:///path/to.sock or tcp://HOST:PORT"
    if text.startswith("unix://"):
        path = text[len("unix://") :]
        if path.startswith("/"):
            return Endpoint("unix", path=path)
        if not path or "/" in path or path in (".", ".."):
            raise EndpointError(
                f"unix endpoint {text!r} needs an absolute path or a bare file name (which lives "
                f"in this user's private {runtime_dir()}); {forms}"
            )
        return Endpoint("unix", path=str(runtime_dir() / path))
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
        raise EndpointError(
            "no endpoint given; use unix://NAME.sock, unix:///path/to.sock or tcp://HOST:PORT"
        )
    return [parse_endpoint(p) for p in parts]


def connect(endpoint: Endpoint, timeout_s: float | None = 5.0) -> socket.socket:
    """A connected blocking stream socket (``TCP_NODELAY`` on TCP; small frames go out at once).

    A Unix socket must be served by a process of this user (``SO_PEERCRED``; the socket file's
    owner where the platform has no peer credentials).

    Raises:
        UntrustedSocketError: the Unix socket is served by another user.
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
        if endpoint.scheme == "unix":
            check_unix_peer(sock, endpoint.path)
    except BaseException:
        sock.close()
        raise
    return sock


def peer_uid(sock: socket.socket, path: str) -> int:
    """The user id of the process serving the connected Unix socket ``sock`` (at ``path``)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: pid, uid, gid of the peer at connect time
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    return os.stat(path).st_uid


def check_unix_peer(sock: socket.socket, path: str) -> None:
    """Raise :class:`UntrustedSocketError` unless this user serves the Unix socket ``sock``."""
    uid = peer_uid(sock, path)
    if uid != os.getuid():
        raise UntrustedSocketError(
            f"unix://{path} is served by another user (uid {uid}); refusing to send anything "
            "to it. Use a socket in your private directory (a bare name such as "
            "unix://yatzy.sock) or one you started"
        )


def bind_unix_owner_only(path: str) -> socket.socket:
    """A bound, owner-only (0o600) Unix socket at ``path``; a stale socket file is removed first.

    The private runtime directory (:func:`runtime_dir`) is created owner-only when ``path`` is
    in it.

    Raises:
        BindError: the path is a live server's socket, another user's file, a non-socket file,
            in a runtime directory others can use, or cannot be bound.
    """
    if Path(path).parent == runtime_dir():
        ensure_private_dir(Path(path).parent)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        mode = info.st_mode
        if info.st_uid != os.getuid():
            raise BindError(
                f"{path} belongs to another user (uid {info.st_uid}); refusing to use it "
                "(choose a path of your own, e.g. unix://yatzy.sock in your private directory)"
            )
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
