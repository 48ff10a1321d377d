"""model.serving.programs: how a batch's chunks reach a program."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from model.serving.programs import chunked, owned_copy


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


def test_an_owned_copy_is_its_rows_values_in_memory_of_its_own() -> None:
    window = np.arange(12.0).reshape(3, 4)
    copy = owned_copy(window[1])
    window[1] = -1.0
    np.testing.assert_array_equal(copy, [4.0, 5.0, 6.0, 7.0])
    assert copy.dtype == window.dtype and copy.shape == (4,)
