"""DESIGN.md's house rule: league/, az/ and common/ import nothing from yatzy/ or diplomacy/."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "leaguezero"
GAME_AGNOSTIC = ("league", "az", "common")
GAMES = ("leaguezero.yatzy", "leaguezero.diplomacy")


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_game_agnostic_packages_do_not_import_games():
    offenders = []
    for pkg in GAME_AGNOSTIC:
        for path in (SRC / pkg).rglob("*.py"):
            for name in _imports(path):
                if name.startswith(GAMES):
                    offenders.append(f"{path.relative_to(SRC)} imports {name}")
    assert not offenders, "\n".join(offenders)
