"""Every bound the web app puts on a request, in one place: bodies, connections, games, agent
budgets and the pool agents move in.

A page on any site can make the browser send requests here, and a local user can send anything:
no request may cost more than these bounds (memory, threads, file descriptors, seconds).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

# --- bodies (checked on Content-Length before a byte is read, then counted as they arrive)
MAX_BODY_BYTES = 64 * 1024  # a JSON request: orders, a move, a new game
MAX_UPLOAD_BYTES = 8 * 1024 * 1024  # a saved Diplomacy game (a 20-year game is well under 1 MB)
UPLOAD_PATHS = ("/api/diplomacy/replays",)  # the routes that take MAX_UPLOAD_BYTES
UPLOAD_CPU_S = 20.0  # CPU seconds a saved game's reading may take (its child is killed past them)
UPLOAD_TIMEOUT_S = 120.0  # wall seconds that child is waited on at most (one stopped, or starved)
MAX_UPLOADS_AT_ONCE = 1  # saved games read at once; another gets "busy, try again"
MAX_SAVED_PHASES = 600  # phases of a saved game the engine is asked to rebuild (200 years)
# Every list and object of an uploaded document, checked before the engine sees it:
MAX_UPLOAD_DEPTH = 16  # nesting (a saved game nests 7 deep)
MAX_UPLOAD_ITEMS = 1000  # entries of one list or object (phases: MAX_SAVED_PHASES)
MAX_UPLOAD_STRING = 20_000  # characters of one string (an LLM's press message is well under)
MAX_SAVED_RULES = 50  # rule names of a saved game (the engine knows about 20)
# imported once by the forkserver, before the children fork ("__main__": else each child would
# import the main module anew, on its own CPU time)
CHILD_PRELOAD = ("__main__", "leaguezero.web.diplomacy_games")

# --- connections (uvicorn's own settings, and the protocol of web/server.py)
REQUEST_TIMEOUT_S = 15.0  # a request's line, headers and body must all arrive within this
KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this (uvicorn timeout_keep_alive)
MAX_CONNECTIONS = 256  # open at once; a new one beyond sheds the oldest idle one with a 503
SHED_LINGER_S = 2.0  # a shed connection reads and drops what its client sends this long at most
MAX_LINGERING = 256  # shed connections lingering at once (the cap at most); beyond, closed at once
MAX_HEADER_BYTES = 16 * 1024  # h11_max_incomplete_event_size: request line plus headers

# --- games (sessions.GameStore)
MAX_GAMES_PER_SESSION = 6  # a new game beyond evicts this session's least recently used one
MAX_SESSIONS_PER_CLIENT = 4  # sessions holding games, per client (peer address)
CLIENT_SHARE = 0.5  # the share of the store's games one client may hold
EVICT_IDLE_S = 600.0  # a new game takes the place of another session's only after this long idle

# --- the pool agents move in (web/workers.py): moves that would wait get "busy, try again"
AGENT_WORKERS = 4

# --- what a Yatzy agent spec (model:PATH?key=value, the form's sims) may ask for
MAX_SIMS = 4096
YATZY_OPTION_CAPS: dict[str, tuple[float, float]] = {  # key: (lowest, highest)
    "sims": (0, MAX_SIMS),
    "budget_reroll": (1, MAX_SIMS),
    "budget_mark": (1, MAX_SIMS),
    "depth": (1, 2),
    "max_inflight_per_game": (1, 64),
    "c_puct": (0, 100),
    "virtual_loss": (0, 100),
    "margin_utility": (0, 100),
    "margin_scale": (1e-3, 1e6),
}
YATZY_WORD_OPTIONS = {"search": ("turn", "puct"), "normalize_q": ("0", "1", "true", "false")}


class LimitError(ValueError):
    """A request that asks for more than the web app allows; the message says the bound."""


def cap_yatzy_spec(spec: str) -> str:
    """``spec`` with its ``?key=value`` options checked against :data:`YATZY_OPTION_CAPS`.

    Returns the spec unchanged but for the query's canonical spelling. Raises
    :class:`LimitError` for an option the web app does not take (``device`` among them: the web
    app plays on the CPU) or a value outside its bounds.
    """
    head, sep, query = spec.partition("?")
    if not sep:
        return spec
    options = parse_qsl(query, keep_blank_values=True)
    for key, value in options:
        if key in YATZY_WORD_OPTIONS:
            if value.lower() not in YATZY_WORD_OPTIONS[key]:
                words = "|".join(YATZY_WORD_OPTIONS[key])
                raise LimitError(f"agent option {key} must be {words}")
            continue
        if key not in YATZY_OPTION_CAPS:
            allowed = ", ".join([*YATZY_OPTION_CAPS, *YATZY_WORD_OPTIONS])
            raise LimitError(f"agent option {key[:40]!r} is not taken here: use {allowed}")
        low, high = YATZY_OPTION_CAPS[key]
        try:
            number = float(value)
        except ValueError:
            raise LimitError(f"agent option {key} must be a number") from None
        if not low <= number <= high:
            raise LimitError(f"agent option {key} must be in {low:g}..{high:g} in the web app")
    return f"{head}?{urlencode(options)}"
