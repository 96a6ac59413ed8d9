"""The shared-key proof between ``llm serve`` and :class:`~..remote.openai_client.OpenAIClient`.

A plain ``Authorization: Bearer KEY`` goes to whoever holds the port: while the server restarts,
another local user can bind it, read the key and the prompt, and answer with a made-up
completion that the client takes for the model's (issue 54). So, with a key, the client never
sends it. Each request carries instead::

    Authorization: LZ-HMAC-V1 <nonce hex>.<unix time>.<body sha256 hex>.<mac hex>

where ``mac = HMAC-SHA256(key, "lz-llm-req-v1" | nonce | time | method | path | body sha256)``
(:func:`request_mac`): it proves the key without showing it and binds this one request (a
16-byte random nonce, the time, the route and the exact body). The server checks it in
constant time, refuses a time more than :data:`MAX_SKEW_S` away from its clock and a nonce it
has seen (:class:`ReplayGuard`: a request a squatter captured cannot be replayed to the real
server later), and signs its answer::

    X-Leaguezero-Proof: HMAC-SHA256(key, "lz-llm-resp-v1" | request mac | status | body sha256)

(:func:`response_mac`). The client reads no answer whose proof does not check: a squatter,
which has not the key, can neither learn it nor forge an answer, and cannot pass off the real
server's answer to one request as the answer to another. Every answer of ``llm serve`` says
``X-Leaguezero-Auth: hmac-v1``, so a client that meets a server without it can say what it met
(vLLM, which knows only plain keys, or something else on the port).

Why an HMAC per request rather than a handshake per connection: the client's HTTP pool opens
connections when it likes (a keep-alive connection the server closed is replaced silently), so
a proof bound to one connection would not cover the next; a proof bound to each request and
each answer does, at the cost of two HMACs per request and no extra round trip. The client
also proves the server (a ``GET /v1/models`` under the same scheme) after every reconnect
before it resends a request, so a squatter found while waiting for a restart does not even get
the prompt. TLS with a pinned certificate would do as much but needs certificates made and
shipped to every worker; the shared key is already there.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict

SCHEME = "LZ-HMAC-V1"
PROOF_HEADER = "X-Leaguezero-Proof"
ADVERTISE_HEADER = "X-Leaguezero-Auth"
ADVERTISED = "hmac-v1"
NONCE_BYTES = 16
MAX_SKEW_S = 120  # the client's and the server's clocks (one machine, or NTP on a cluster)
REPLAY_ENTRIES = 1 << 17  # nonces remembered; beyond it the oldest times are refused outright


def body_digest(body: bytes) -> str:
    """SHA-256 (hex) of a request or answer body."""
    return hashlib.sha256(body).hexdigest()


def request_mac(key: str, nonce: str, stamp: int, method: str, path: str, digest: str) -> str:
    """HMAC-SHA256 (hex) of one request under ``key`` (see module doc)."""
    message = "\0".join(("lz-llm-req-v1", nonce, str(stamp), method.upper(), path, digest))
    return hmac.new(key.encode("utf-8"), message.encode("utf-8"), "sha256").hexdigest()


def response_mac(key: str, request: str, status: int, digest: str) -> str:
    """HMAC-SHA256 (hex) of the answer with ``status`` and body ``digest`` to the request
    whose mac was ``request``."""
    message = "\0".join(("lz-llm-resp-v1", request, str(int(status)), digest))
    return hmac.new(key.encode("utf-8"), message.encode("utf-8"), "sha256").hexdigest()


def sign_request(key: str, method: str, path: str, body: bytes) -> tuple[str, str]:
    """(the ``Authorization`` value, the request mac) of one request."""
    nonce, stamp, digest = secrets.token_hex(NONCE_BYTES), int(time.time()), body_digest(body)
    mac = request_mac(key, nonce, stamp, method, path, digest)
    return f"{SCHEME} {nonce}.{stamp}.{digest}.{mac}", mac


def proven(key: str, mac: str, status: int, body: bytes, proof: str | None) -> bool:
    """Whether ``proof`` (the answer's header) shows the answer comes from a holder of ``key``."""
    if not proof:
        return False
    wanted = response_mac(key, mac, status, body_digest(body))
    return hmac.compare_digest(proof.strip().encode("ascii", "replace"), wanted.encode())


class ReplayGuard:
    """The nonces the server has accepted within the clock window, bounded in entries.

    When full, the oldest entry is dropped and its time becomes a floor: a request stamped at
    or before it is refused, so a dropped nonce can never be replayed (a client's requests are
    stamped now, far above the floor, unless more than ``entries`` arrive within the window).
    """

    def __init__(self, entries: int = REPLAY_ENTRIES, skew_s: int = MAX_SKEW_S) -> None:
        self.entries, self.skew_s = entries, skew_s
        self._seen: OrderedDict[str, int] = OrderedDict()  # nonce -> stamp, oldest first
        self._floor = 0
        self._lock = threading.Lock()

    def check(self, nonce: str, stamp: int, now: float | None = None) -> str:
        """Why a request with ``nonce`` stamped ``stamp`` is refused, or "" (then remembered).
        Call only after its mac checked: only key holders fill this."""
        now = time.time() if now is None else now
        if abs(stamp - now) > self.skew_s:
            return (
                f"the request is stamped {stamp - now:+.0f} s from this server's clock (more "
                f"than {self.skew_s} s): synchronise the clocks"
            )
        with self._lock:
            while self._seen and next(iter(self._seen.values())) < now - self.skew_s:
                self._seen.popitem(last=False)  # outside the window: refused by time anyway
            if stamp <= self._floor or nonce in self._seen:
                return "the request was already served (a replay)"
            self._seen[nonce] = stamp
            while len(self._seen) > self.entries:
                _, oldest = self._seen.popitem(last=False)
                self._floor = max(self._floor, oldest)
        return ""


def parse_authorization(value: str) -> tuple[str, int, str, str] | None:
    """(nonce, stamp, body digest, mac) of an ``LZ-HMAC-V1`` header value; None if not one."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        return None
    parts = rest.strip().split(".")
    if len(parts) != 4:
        return None
    nonce, stamp, digest, mac = parts
    hexdigits = set("0123456789abcdef")
    if (
        len(nonce) != 2 * NONCE_BYTES
        or len(digest) != 64
        or len(mac) != 64
        or not set(nonce + digest + mac) <= hexdigits
        or not stamp.isdigit()
        or len(stamp) > 12
    ):
        return None
    return nonce, int(stamp), digest, mac
