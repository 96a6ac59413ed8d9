"""The inference server's admin credential: who may change what a server serves.

``LOAD_MODEL`` swaps the weights every client of a server plays with, so it is an admin
operation. Over TCP any local user (and, with ``--public``, other machines) can connect, so
there it needs the server's **admin token**: a random secret in a file only its owner can read
(default ``~/.leaguezero/infer_admin_token``, or ``$LEAGUEZERO_ADMIN_TOKEN_FILE``), created by
the first server that needs it. A Unix socket is owner-only (0o600), so there the token is
needed only when the server was started with one for its Unix socket
(``yz infer-server --admin-token-file``, :attr:`ServerSettings.unix_needs_token`). The token
travels in the control argument, ahead of the path::

    lz-admin-token <64 hex digits>\\n/path/to/checkpoint.pt

The client sends it over TCP, and over a Unix socket only after the server refused the load
without it (and only to a socket this user serves, :func:`~.endpoint.check_unix_peer`), so a
token never reaches a process that did not ask for it.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
from pathlib import Path

TOKEN_PREFIX = "lz-admin-token "
TOKEN_ENV = "LEAGUEZERO_ADMIN_TOKEN_FILE"


class AdminTokenError(RuntimeError):
    """A token file that is unsafe (others can read it) or unreadable; the message says why."""


def default_token_path() -> Path:
    """``$LEAGUEZERO_ADMIN_TOKEN_FILE`` or ``~/.leaguezero/infer_admin_token``."""
    env = os.environ.get(TOKEN_ENV)
    return Path(env) if env else Path.home() / ".leaguezero" / "infer_admin_token"


def read_token(path: str | os.PathLike | None = None) -> str | None:
    """The token stored at ``path`` (default location if None), or None if there is no file.

    Raises:
        AdminTokenError: the file is not a regular file owned by this user with mode 0o600
            (or stricter), or it holds no token.
    """
    path = Path(path) if path is not None else default_token_path()
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        raise AdminTokenError(f"admin token file {path} is not a regular file of this user")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise AdminTokenError(
            f"admin token file {path} can be read by other users; run  chmod 600 {path}"
        )
    token = path.read_text().strip()
    if not token:
        raise AdminTokenError(f"admin token file {path} is empty; delete it to make a new one")
    return token


def load_or_create_token(path: str | os.PathLike | None = None) -> tuple[str, Path]:
    """The server side: read the token at ``path``, creating it (0o600) if missing.

    Returns (token, path). Raises :class:`AdminTokenError` as :func:`read_token`.
    """
    path = Path(path) if path is not None else default_token_path()
    token = read_token(path)
    if token is not None:
        return token, path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_hex(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        with contextlib.suppress(FileExistsError):  # another server made one meanwhile: use it
            os.link(tmp, path)  # atomic, and never overwrites an existing token
    finally:
        os.unlink(tmp)
    return read_token(path) or token, path


def with_token(argument: str, token: str | None) -> str:
    """``argument`` with ``token`` in front (unchanged when token is None)."""
    return argument if token is None else f"{TOKEN_PREFIX}{token}\n{argument}"


def split_token(argument: str) -> tuple[str | None, str]:
    """(token or None, the rest) of a control argument."""
    if argument.startswith(TOKEN_PREFIX):
        first, _, rest = argument.partition("\n")
        return first[len(TOKEN_PREFIX) :].strip(), rest
    return None, argument


def token_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison (a timing side channel would leak the token byte by byte)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def admin_refusal(
    expected: str | None, token: str | None, owner_only_socket: bool, unix_needs_token: bool = False
) -> str:
    """Why an admin operation sent with ``token`` is refused, or "" when it may run.

    Args:
        expected: the server's admin token (None: the server has none).
        token: the token the request carried (None: none).
        owner_only_socket: the request came over the owner-only Unix socket.
        unix_needs_token: the Unix socket, too, needs the token (ignored without one).

    The message is the same whatever the request asked for, so a refused client learns nothing.
    """
    if expected is None:
        if owner_only_socket:
            return ""
        return "this server accepts no admin operations over TCP (it has no admin token)"
    if token_matches(token, expected):
        return ""
    if owner_only_socket and token is None and not unix_needs_token:
        return ""
    return (
        "admin operations need this server's admin token: run the command as the user who "
        "started the server (it reads ~/.leaguezero/infer_admin_token) or pass --token-file"
    )
