"""benchmarks/gpu/gpu.sh, never run on a GPU here: its dry run (the same steps on CPU, tiny sizes),
its refusal without a GPU, and the tolerance check it relies on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.gpu.check import TOLERANCE, differences
from streams.settings import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "gpu.sh"
RESULTS = REPO_ROOT / "benchmarks" / "results" / "gpu.json"


def run_script(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, "TMPDIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def forecasts(seed: int = 0) -> np.ndarray:
    """(windows, horizon, q10/q50/q90) log returns, ordered, widening with the horizon."""
    rng = np.random.default_rng(seed)
    width = 1e-4 * rng.uniform(0.5, 2.0, size=(50, 1, 1)) * np.sqrt(np.arange(1, 11))[:, None]
    return width * np.array([-0.5, 0.0, 0.5]) + 1e-5 * rng.normal(size=(50, 10, 1))


def test_bf16_rounding_of_every_value_is_within_tolerance() -> None:
    ref = forecasts()
    rounded = torch.from_numpy(ref).to(torch.bfloat16).double().numpy()
    result = differences(rounded, ref)
    assert 0 < result["max_of_width"] <= TOLERANCE["max_of_width"]
    assert result["within_tolerance"]
    assert result["abs_bp_max"] > 0 and result["rel_bp_max"] <= 2**-8 * 1e4 + 1e-9


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda f: f[:, :, ::-1],  # q10 and q90 swapped
        lambda f: np.roll(f, 1, axis=0),  # each forecast given to the next window
        lambda f: np.where(np.arange(f.size).reshape(f.shape) == 7, f + 1e-4, f),  # one value
        lambda f: np.where(np.arange(f.size).reshape(f.shape) == 7, np.nan, f),
    ],
)
def test_wrong_forecasts_are_beyond_tolerance(corrupt) -> None:  # type: ignore[no-untyped-def]
    ref = forecasts()
    assert not differences(corrupt(ref.copy()), ref)["within_tolerance"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_without_a_gpu_the_script_refuses_at_once_and_names_the_dry_run(tmp_path: Path) -> None:
    done = run_script(tmp_path, BARCAST_GPU_DRY_RUN="0")
    assert done.returncode != 0
    assert "no CUDA device is visible" in done.stderr
    assert "--dry-run" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing ran


def test_dry_run_from_the_environment(tmp_path: Path) -> None:
    """BARCAST_GPU_DRY_RUN=1 is --dry-run: every step on cpu, results in the temporary folder."""
    stub = tmp_path / "python"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    stub.chmod(0o755)
    done = run_script(tmp_path, BARCAST_GPU_DRY_RUN="1", PYTHON=str(stub))
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[:2] for c in calls] == [
        ["-m", "benchmarks.model"],
        ["-m", "benchmarks.pipeline"],
        ["-m", "benchmarks.gpu.check"],
    ]
    assert "--device cpu" in calls[2] and "--dry-run" in calls[2]
    assert all(str(tmp_path / "barcast-gpu-dry.") in c.split("--out ")[1] for c in calls)


@pytest.mark.integration
def test_dry_run_writes_every_figure_of_a_gpu_run(tmp_path: Path) -> None:
    before = RESULTS.stat().st_mtime_ns if RESULTS.exists() else None
    done = run_script(tmp_path, "--dry-run", BARCAST_GPU_DRY_RUN="0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (path,) = tmp_path.glob("barcast-gpu-dry.*/gpu.json")
    assert f"wrote {path}" in done.stdout
    result = json.loads(path.read_text())

    assert result["dry_run"] is True
    assert result["device"] == "cpu" and result["precision"] == "fp32"
    assert result["tolerance"] == TOLERANCE
    assert result["check"]["within_tolerance"] and result["check"]["values"] > 0
    emulation = result["bf16_cpu_emulation"]  # real bf16 rounding went through the check
    assert emulation["within_tolerance"] and emulation["max_of_width"] > 0
    for key in ("abs_bp_max", "abs_bp_median", "rel_bp_max", "rel_bp_median"):
        assert key in result["check"] and key in emulation
    assert result["memory"]["symbols"] == result["windows"] and result["memory"]["finite"]
    assert "peak_mb" not in result["memory"]  # CUDA only
    assert result["pipeline_burst"]["device"] == "cpu"
    assert result["pipeline_burst"]["burst_ms"] > 0 and result["pipeline_burst"]["met"] is False
    stream = result["stream"]  # the stream encoder's row beside the window one's
    assert stream["check"]["within_tolerance"] and stream["check"]["values"] > 0
    assert stream["bf16_cpu_emulation"]["within_tolerance"]
    assert stream["bf16_cpu_emulation"]["max_of_width"] > 0 and stream["memory"]["finite"]
    for encoder in ("window", "stream"):
        restarted = result["pipeline_burst"]["encoders"][encoder]
        assert restarted["burst_1000_ms"] > 0 and restarted["met"] is False
    assert result["model_benchmark"]["cuda"] is None and result["model_benchmark"]["batches"]
    assert result["provenance"]["commit"] and result["provenance"]["gpu"] is None
    after = RESULTS.stat().st_mtime_ns if RESULTS.exists() else None
    assert after == before  # the dry run never writes benchmarks/results
