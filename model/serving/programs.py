"""The model's two per-chunk programs in the forecast worker: TorchScript on CPU fp32, else eager.

A chunk is hundreds of small ops. Run eagerly in the inference thread, each op gives the GIL
back and must win it again from the event loop, and in a burst (the loop busy with the very
bars being forecast) that convoy makes a chunk many times slower. A traced chunk runs in C++
with the GIL released throughout. Chunks have fixed shapes (see model.serving.forecast_engine),
so a trace records exactly the ops eager mode runs and results are bit-identical; the engine's
tests hold it to that. `torch.jit.trace` is deprecated, but its successors do not fit:
`torch.export` runs a graph op by op from Python again, and `torch.compile` fuses ops, which
changes rounding. bf16 autocast stays eager: on CUDA a chunk is a few kernel launches, not the
GIL.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from model.tft import StaticContext, TemporalFusionTransformer


class ChunkPrograms(NamedTuple):
    # (encoded, selection, enrichment, state_h, state_c, future) -> quantiles (explaining: and
    # attention, future weights)
    forward: Callable[..., Tensor]
    # steps (n, 1, n_hist), selection -> (n, 1, h) (explaining: and weights (n, 1, n_hist))
    encode: Callable[[Tensor, Tensor], Tensor]
    forward_rows: int  # the windows and steps of every call: inputs are padded to them
    encode_rows: int


class _Forward(nn.Module):
    """`forward_encoded`'s quantiles, with the static context as plain tensors (a trace takes
    tensors only); the static weights only pass through to an output this drops. Explaining,
    also the attention and known-future weights the same pass computed."""

    def __init__(self, model: TemporalFusionTransformer, explain: bool = False) -> None:
        super().__init__()
        self.model, self.explain = model, explain

    def forward(self, encoded: Tensor, *static_and_future: Tensor) -> Tensor | tuple[Tensor, ...]:
        selection, enrichment, state_h, state_c, future = static_and_future
        static = StaticContext(selection, enrichment, state_h, state_c, selection)
        out = self.model.forward_encoded(encoded, static, future)
        return (out.quantiles, out.attention, out.future_weights) if self.explain else out.quantiles


class _Encode(nn.Module):
    """Step encodings; explaining, with their variable-selection weights."""

    def __init__(self, model: TemporalFusionTransformer, explain: bool = False) -> None:
        super().__init__()
        self.model, self.explain = model, explain

    def forward(self, steps: Tensor, selection: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        encoded, weights = self.model.encode_history(steps, selection)
        return (encoded, weights) if self.explain else encoded


def chunk_programs(
    model: TemporalFusionTransformer,
    device: torch.device,
    precision: str,
    forward_rows: int,
    encode_rows: int,
    explain: bool = False,
) -> ChunkPrograms:
    """`explain`: programs that also return what an explanation needs (forward: quantiles,
    attention, future weights; encode: encodings, selection weights). They run the same ops,
    so their quantiles and encodings are bit-identical to the plain programs'."""
    forward, encode = _Forward(model, explain).eval(), _Encode(model, explain).eval()
    if device.type != "cpu" or precision != "fp32":
        return ChunkPrograms(forward, encode, forward_rows, encode_rows)
    c = model.config
    state = [torch.zeros(forward_rows, c.hidden) for _ in range(4)]
    window = torch.zeros(forward_rows, c.lookback, c.hidden)
    future = torch.zeros(forward_rows, c.horizon, c.n_future)
    steps, selection = torch.zeros(encode_rows, 1, c.n_hist), torch.zeros(encode_rows, c.hidden)
    with torch.no_grad(), warnings.catch_warnings():
        # Expected: the deprecation, and shape-derived Python ints frozen into the trace.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # No check_trace: it reruns each program on these zeros against eager mode, twice the
        # tracing's cost at every load and reload; the engine's tests hold the programs to eager
        # mode on real windows, bit for bit.
        return ChunkPrograms(
            torch.jit.trace(forward, (window, *state, future), check_trace=False),
            torch.jit.trace(encode, (steps, selection), check_trace=False),
            forward_rows,
            encode_rows,
        )
