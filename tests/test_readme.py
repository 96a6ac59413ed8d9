"""The README is a page for users and agrees with CI: at most 150 lines, the two commands as
`.ci/run` runs them, no stale protocol version, and every relative link in it and in docs/
resolves to a file and, where it names one, a heading (a moved section breaks none)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
INSTALL = 'pip install torch==2.13.0 -e ".[dev]"'
TESTS = "python -m pytest -q -n 2"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#+\s+(.*)", line)
        if match:
            found.add(_slug(match.group(1)))
    return found


def test_readme_is_short_and_its_commands_are_cis():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert "pip install torch==2.13.0 -e . && yz run --out runs/first" in text
    assert f"{INSTALL} && {TESTS}" in text
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'python -m pip install -q -e ".[dev]"' in ci and f"\n{TESTS}\n" in ci
    assert "yz eval runs/first" in text and "--resume" in text


def test_the_readme_names_no_protocol_version_but_the_current_one():
    from leaguezero.az.inference.protocol import PROTOCOL_VERSION

    for version in re.findall(r"protocol v(\d+)", README.read_text(encoding="utf-8")):
        assert int(version) == PROTOCOL_VERSION, f"README.md: protocol v{version}"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    for path in [README, *sorted((REPO / "docs").rglob("*.md"))]:
        for link in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            target, _, anchor = link.partition("#")
            file = (path.parent / target).resolve() if target else path
            if not file.exists():
                broken.append(f"{path.name}: {link}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{path.name}: {link} (no such heading)")
    assert not broken, "\n".join(broken)
