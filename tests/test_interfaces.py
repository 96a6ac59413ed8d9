"""Declared interfaces in yatzy/, az/, league/ and common/ (issue 24, item 4; the Diplomacy half
of these rules is in tests/test_architecture.py).

- No comparison of a kind/mode/backend/arch string outside the places that parse the config
  (``yatzy/config.py``, ``common/config.py``): a search kind is a
  :class:`leaguezero.yatzy.train.kinds.SearchKind`, not a string to switch on.
- No ``hasattr``/``getattr`` probe of a protocol member: optional members are declared.

``KNOWN`` lists the places that still do it (file: count), so that the test fails on every new
one and on a fixed one that is not struck off the list.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "leaguezero"
AREAS = ("yatzy", "az", "league", "common")
CONFIG_PARSERS = {"yatzy/config.py", "common/config.py"}
SWITCH_NAMES = ("kind", "mode", "backend", "arch")
PROTOCOL_MEMBERS = {"evaluate_async", "margin_weight", "close", "model", "record_size"}

# What is left: the command line picking the backend (job.py), a league match record's ``kind``
# field (league/types.py's MatchResult, a data field, not a config switch) and the network
# factory's arch switch.
KNOWN = {
    "yatzy/cli/job.py": 2,  # run.backend == "ray" (the command line picks the backend)
    "yatzy/train/league_run.py": 1,  # result.kind != "training"
    "yatzy/train/net.py": 2,  # arch == "board_towers" / "resmlp"
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _offences(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = node.left, node.comparators[0]
            sides = [(left, right), (right, left)]
            for name_side, const in sides:
                if (
                    isinstance(const, ast.Constant)
                    and isinstance(const.value, str)
                    and len(const.value) > 1  # not numpy's dtype.kind letters
                    and _name(name_side).endswith(SWITCH_NAMES)
                ):
                    count += 1
        if (
            isinstance(node, ast.Call)
            and _name(node.func) in ("hasattr", "getattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PROTOCOL_MEMBERS
        ):
            count += 1
    return count


def test_no_string_switches_or_protocol_probes():
    found: Counter[str] = Counter()
    for area in AREAS:
        for path in sorted((SRC / area).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            if rel in CONFIG_PARSERS:
                continue
            n = _offences(ast.parse(path.read_text(), filename=str(path)))
            if n:
                found[rel] = n
    assert dict(found) == KNOWN, (
        "a kind/mode/backend/arch string compared, or a protocol member probed, outside the "
        "config parsers: declare it instead (or strike a fixed place off KNOWN)"
    )
