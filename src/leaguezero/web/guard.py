"""The door every request passes first: who may ask (Host), from where (Origin), and how much
(body size), answered before a route runs or a body byte is read.

- **Host**: a DNS-rebinding page reaches this server under its own name, so the ``Host`` header
  must be an IP address (a page whose origin is an address is this server's own), ``localhost``,
  the name the server is bound to, or one given with ``--allow-host``.
- **Cross-site writes**: a page on another site can send "simple" requests (a form post, a
  ``text/plain`` body) without a preflight. A request that changes state must carry what such a
  page cannot send: a JSON content type or the ``X-Leaguezero`` header (both need a preflight,
  which this app never grants), and an ``Origin`` (when the browser sends one) that is this
  server's own.
- **Bodies**: ``Content-Length`` over the route's bound is refused unread; a chunked body is
  counted as it arrives and refused once over.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from leaguezero.web.limits import MAX_BODY_BYTES, MAX_UPLOAD_BYTES, UPLOAD_PATHS

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CSRF_HEADER = "x-leaguezero"  # the pages send it on every call (static/common.js)


def host_name(host: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8080`` -> ``::1``), lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0].rstrip(".") if host.count(":") == 1 else host.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class RequestGuard:
    """ASGI middleware applying the checks of the module docstring.

    Args:
        app: the app behind it.
        allowed_hosts: host names served besides IP addresses and ``localhost`` (the bound name,
            ``--allow-host`` names).
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = {"localhost", *(host_name(h) for h in allowed_hosts if h)}

    def host_allowed(self, name: str) -> bool:
        return bool(name) and (name in self.allowed or _is_address(name))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem = self._problem(scope, headers)
        if problem is not None:
            status, message = problem
            response = JSONResponse({"error": message}, status, headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        limit = MAX_UPLOAD_BYTES if scope["path"] in UPLOAD_PATHS else MAX_BODY_BYTES
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:  # FastAPI passes an HTTPException from the body through
                    raise HTTPException(413, _too_large(limit))
            return message

        await self.app(scope, counted, send)

    def _problem(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        """``(status, one line)`` for a request refused at the door, else None."""
        host = host_name(headers.get("host", ""))
        if not self.host_allowed(host):
            shown = host[:60] or "(none)"
            return 400, (
                f"host {shown!r} is not served here: use the address or localhost, "
                "or start the server with --allow-host NAME"
            )
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None:
                parts = urlsplit(origin)
                if origin == "null" or parts.netloc.lower() != headers.get("host", "").lower():
                    return 403, "a request from another site cannot change anything here"
            if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
                return 403, "a request from another site cannot change anything here"
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json" and CSRF_HEADER not in headers:
                return 415, "send JSON (Content-Type: application/json) or the X-Leaguezero header"
        length = headers.get("content-length")
        limit = MAX_UPLOAD_BYTES if scope["path"] in UPLOAD_PATHS else MAX_BODY_BYTES
        if length is not None:
            if not length.isdigit():
                return 400, "Content-Length is not a number"
            if int(length) > limit:
                return 413, _too_large(limit)
        return None


def _too_large(limit: int) -> str:
    size = f"{limit // 2**20} MB" if limit >= 2**20 else f"{limit // 1024} KB"
    return f"the request body is over {size}"
