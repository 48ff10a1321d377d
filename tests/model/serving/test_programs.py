"""model.serving.programs: how a batch's chunks reach a program."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from model.serving.forecast_engine import ForecastEngine
from model.serving.programs import Chunks, chunked, owned_copy
from tests.checkpoints import make_checkpoint


class _Sum(nn.Module):
    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        return [inputs[0] + inputs[1], inputs[0][:, :1] * 2]


def test_a_batch_runs_its_chunks_in_one_scripted_call_as_chunk_by_chunk() -> None:
    """A traced program's batch is one call from Python (each op Python calls gives the GIL
    up: docs/design.md, Forecast stage), padded chunk by chunk as eager chunks are."""
    a, b = torch.arange(40.0).view(20, 2), torch.ones(20, 2)
    traced = torch.jit.trace(_Sum(), ([a[:16], b[:16]],), check_trace=False)
    scripted = torch.jit.script(Chunks(traced, 16))
    assert isinstance(scripted, torch.jit.ScriptModule)
    total, first = chunked(scripted, a, b)  # one whole chunk, one padded
    assert torch.equal(total, a + b) and torch.equal(first, a[:, :1] * 2)
    eager = chunked(Chunks(_Sum(), 16), a, b)
    assert all(torch.equal(x, y) for x, y in zip(eager, (total, first), strict=True))


def test_pooled_chunks_are_the_batchs_call() -> None:
    a, b = torch.randn(40, 3), torch.randn(40, 3)
    program = Chunks(_Sum(), 16)
    with ThreadPoolExecutor(2) as pool:
        pooled = chunked(program, a, b, pool=pool)
    assert all(torch.equal(x, y) for x, y in zip(pooled, chunked(program, a, b), strict=True))


def test_an_owned_copy_is_its_rows_values_in_memory_of_its_own() -> None:
    window = np.arange(12.0).reshape(3, 4)
    copy = owned_copy(window[1])
    window[1] = -1.0
    np.testing.assert_array_equal(copy, [4.0, 5.0, 6.0, 7.0])
    assert copy.dtype == window.dtype and copy.shape == (4,)


@pytest.mark.parametrize("encoder", ["window", "stream"])
def test_every_cpu_program_is_one_scripted_call_per_batch(tmp_path: Path, encoder: str) -> None:
    """On CPU, each program a batch runs (the stream encoder's steps too) is scripted, so a
    batch gives the GIL up once per program, not per chunk or op."""
    make_checkpoint(tmp_path / "a", encoder=encoder)
    programs = ForecastEngine(tmp_path / "a").served.programs
    assert (programs.step is None) == (encoder == "window")
    scripted = [programs.forward, programs.encode, programs.step or programs.forward]
    assert all(isinstance(p, torch.jit.ScriptModule) for p in scripted)
