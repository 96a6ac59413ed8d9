"""The inference server's admin credential: who may change what a server serves.

``LOAD_MODEL`` swaps the weights every client of a server plays with, so it is an admin
operation. Over TCP any local user (and, with ``--public``, other machines) can connect, so
there it needs the server's **admin token**: a random secret in a file only its owner can read
(default ``~/.leaguezero/infer_admin_token``, or ``$LEAGUEZERO_ADMIN_TOKEN_FILE``), created by
the first server that needs it. A Unix socket is owner-only (0o600), so there the token is
needed only when the server was started with one for its Unix socket
(``yz infer-server --admin-token-file``,
:attr:`~leaguezero.az.inference.server_settings.ServerSettings.unix_needs_token`).

The token never crosses the wire (protocol v2). A client that needs it first asks the server for
a **challenge** (control op ``CHALLENGE``): a fresh random nonce, kept by the server for that
connection and good for one admin request. It then sends the ``LOAD_MODEL`` argument as::

    lz-admin-hmac <64 hex digits>\\n/path/to/checkpoint.pt

where the digits are ``HMAC-SHA256(token, "lz-admin-v2" | nonce | model_id | path)``
(:func:`admin_signature`), compared by the server in constant time. Whoever holds the port
instead of the real server (a squatter started first) sees a signature over its own nonce: it
cannot be replayed to the real server, whose nonces are fresh, and it signs only the load the
client asked for (the model id and path are inside it). The client signs over TCP, and over a
Unix socket only after the server refused the load without it (and only on a socket this user
serves, :func:`~.endpoint.check_unix_peer`).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from leaguezero.az.inference.endpoint import Endpoint
from leaguezero.az.inference.protocol import ControlOp, InferenceError, Reply, Status

TOKEN_PREFIX = "lz-admin-token "  # protocol v1's plain token line: refused, never sent now
SIGNATURE_PREFIX = "lz-admin-hmac "
NONCE_BYTES = 32
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


def new_nonce() -> bytes:
    """A fresh challenge nonce (32 random bytes)."""
    return secrets.token_bytes(NONCE_BYTES)


def admin_signature(token: str, nonce: bytes, model_id: int, path: str) -> str:
    """HMAC-SHA256 (hex) of one admin load under ``token``: binds the server's ``nonce``, the
    ``model_id`` and the ``path``, so it proves the token without showing it and authorises only
    this load on the connection that got this nonce."""
    message = b"".join(
        (b"lz-admin-v2\0", nonce, model_id.to_bytes(4, "little"), path.encode("utf-8"))
    )
    return hmac.new(token.encode("utf-8"), message, "sha256").hexdigest()


def with_signature(path: str, signature: str | None) -> str:
    """The LOAD_MODEL argument: ``path`` with a signature line in front (unchanged when None)."""
    return path if signature is None else f"{SIGNATURE_PREFIX}{signature}\n{path}"


def split_signature(argument: str) -> tuple[str | None, str]:
    """(signature or None, the path) of a LOAD_MODEL argument. A protocol-v1 token line is
    returned as the signature "" (it can never match)."""
    for prefix in (SIGNATURE_PREFIX, TOKEN_PREFIX):
        if argument.startswith(prefix):
            first, _, rest = argument.partition("\n")
            return (first[len(prefix) :].strip() if prefix == SIGNATURE_PREFIX else ""), rest
    return None, argument


def admin_refusal(
    expected: str | None,
    signature: str | None,
    nonce: bytes | None,
    model_id: int,
    path: str,
    owner_only_socket: bool,
    unix_needs_token: bool = False,
) -> str:
    """Why an admin load of ``path`` as ``model_id`` signed with ``signature`` is refused, or ""
    when it may run.

    Args:
        expected: the server's admin token (None: the server has none).
        signature: the signature the request carried (None: none).
        nonce: the challenge this connection was given for it (None: none asked or used up).
        owner_only_socket: the request came over the owner-only Unix socket.
        unix_needs_token: the Unix socket, too, needs the token (ignored without one).

    The message is the same whatever the request asked for, so a refused client learns nothing.
    """
    if expected is None:
        if owner_only_socket:
            return ""
        return "this server accepts no admin operations over TCP (it has no admin token)"
    if signature and nonce is not None:
        wanted = admin_signature(expected, nonce, model_id, path)
        # Constant time: a timing side channel would leak the expected signature byte by byte.
        if hmac.compare_digest(signature.encode("ascii", "replace"), wanted.encode("ascii")):
            return ""
    if owner_only_socket and signature is None and not unix_needs_token:
        return ""
    return (
        "admin operations need this server's admin token: run the command as the user who "
        "started the server (it reads ~/.leaguezero/infer_admin_token) or pass --token-file"
    )


def load_signed(call, endpoint: Endpoint, model_id: int, path: str, token: str | None) -> Reply:
    """Load ``path`` as ``model_id`` through ``call(op, model_id, argument) -> Reply`` (which
    raises :class:`InferenceError` on an error status): signed at once over TCP; over a Unix
    socket unsigned first, signed only when the server refuses that and a token is at hand."""

    def signed() -> Reply:
        challenge = call(ControlOp.CHALLENGE, 0, "")
        try:
            nonce = bytes.fromhex(json.loads(challenge.message)["nonce"])
        except (ValueError, KeyError, TypeError):
            raise InferenceError(
                Status.MALFORMED, "the server's admin challenge is not valid; nothing was signed"
            ) from None
        signature = admin_signature(token, nonce, model_id, path)
        return call(ControlOp.LOAD_MODEL, model_id, with_signature(path, signature))

    if endpoint.scheme == "tcp" and token is not None:
        return signed()
    try:
        return call(ControlOp.LOAD_MODEL, model_id, path)
    except InferenceError as err:
        if not _retry_with_token(err.status, endpoint, token):
            raise
        return signed()


def _retry_with_token(status: Status, endpoint: Endpoint, token: str | None) -> bool:
    """Whether a refused load over a Unix socket is sent again, now signed with the token."""
    return status == Status.UNAUTHORIZED and endpoint.scheme == "unix" and token is not None
