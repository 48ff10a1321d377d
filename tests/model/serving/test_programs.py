"""model.serving.programs: how a batch's chunks reach a program."""

from __future__ import annotations

import torch
from torch import Tensor

from model.serving.programs import chunked


def test_a_chunks_inputs_are_held_from_cpp_while_its_program_runs() -> None:
    """Each input a program gets has a reference besides its Python object's: otherwise every
    op of a traced program that lets go of one takes the GIL (docs/design.md, Forecast stage)."""
    counts: list[list[int]] = []

    def program(*inputs: Tensor) -> Tensor:
        counts.append([x._use_count() for x in inputs])
        return inputs[0] + inputs[1]

    a, b = torch.arange(40.0).view(20, 2), torch.ones(20, 2)
    out = chunked(16, program, a, b)  # one whole chunk, one padded
    assert torch.equal(out, a + b)
    assert len(counts) == 2
    assert all(count >= 2 for call in counts for count in call), counts
