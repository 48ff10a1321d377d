"""The model's two per-chunk programs in the forecast worker: TorchScript on CPU fp32, else eager.

A chunk is hundreds of small ops. Run eagerly in the inference thread, each op gives the GIL
back and must win it again from the event loop, and in a burst (the loop busy with the very
bars being forecast) that convoy makes a chunk many times slower. A traced chunk runs in C++
with the GIL released throughout, so long as no tensor that Python holds drops to its Python
reference alone within it; `Chunks` holds the inputs, and runs a batch's chunks in one call.
Chunks have fixed shapes (see model.serving.forecast_engine), so a trace records exactly the
ops eager mode runs and results are bit-identical; the engine's tests hold it to that.
`torch.jit.trace` and `torch.jit.script` are deprecated, but their successors do not fit:
`torch.export` runs a graph op by op from Python again, and `torch.compile` fuses ops, which
changes rounding. bf16 autocast stays eager: on CUDA a chunk is a few kernel launches, not the
GIL.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from model.tft import StaticContext, TemporalFusionTransformer

# Matrix kernels pick their code path (and so their rounding) by shape. Running the model only
# on fixed-size row chunks, padded, makes every forecast bit-identical whatever else shared its
# micro-batch: a restarted worker or a replay with other timing agree exactly, and a step
# encoded incrementally equals the same step encoded within a whole window.
# A row's rounding must not depend on where in its chunk it lands either, so chunks are
# multiples of 16 rows and each fits one CPU block of VariableSelection (tests hold the engine
# to this at the serving size). Bigger chunks pay PyTorch's per-op overhead less often but make
# a lone window, or a live minute of a few symbols, pay for a whole chunk. Forward chunks are 64
# rows on CPU as on CUDA: on CUDA a chunk costs its kernel launches whatever its rows, and on CPU
# each chunk's ops are called one by one from C++ (within `Chunks`), so fewer, bigger chunks pay
# that less often. An encoding chunk is cheap; static contexts, computed once per symbol, keep
# small chunks.
# With max_batch=1 every window runs alone, so a chunk of exactly one window (and one step) is
# already the same for every window: no padding, and forecasts agree exactly across restarts and
# replays of that setting (they round differently from padded chunks' by float rounding).
ENCODE_ROWS = 64
FORWARD_ROWS = 64
STATIC_ROWS = 16

# torch's intra-op threads in a forecast worker. A chunk runs on one core, and a micro-batch's
# chunks run side by side on `chunk_pool`'s threads instead (BARCAST_INFERENCE_THREADS):
# reductions split over intra-op threads round differently, whereas a chunk on one thread
# computes the same wherever it runs, so forecasts do not depend on the setting or the machine.
# An offline reference of a worker's forecasts must run with as many.
TORCH_THREADS = 1


class ChunkPrograms(NamedTuple):
    """A model's programs, each over a whole batch in chunks (`Chunks`): a list of inputs, each
    `(n, ...)`, to a list of outputs."""

    # [encoded, selection, enrichment, state_h, state_c, future] -> [quantiles] (explaining:
    # and attention, future weights)
    forward: Chunks
    # [steps (n, 1, n_hist), selection] -> [(n, 1, h)] (explaining: and weights (n, 1, n_hist))
    encode: Chunks
    forward_rows: int  # the windows and steps of every chunk: inputs are padded to them
    encode_rows: int
    # The streaming encoder's (model.serving.streaming; None: the window encoder's model):
    # [encoded (n, 1, h), h, c (n, layers, h), enrichment] -> next h, c, and the rows' keys
    # and values; `forward` is then [keys, values, h, c, selection, enrichment, future] ->
    # [quantiles]
    step: Chunks | None = None


class _Listed(nn.Module):
    """A program with its inputs and outputs as lists, as `Chunks` passes them."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        out = self.module(*inputs)
        return list(out) if isinstance(out, tuple) else [out]


class Chunks(nn.Module):
    """`program` over a batch in row chunks of exactly `rows` (the last padded by repeating its
    final row), the outputs concatenated. Scripted around a traced program, a whole batch is
    one call from Python, which gives the GIL up once: each op that Python calls, and each
    tensor it frees, gives it up too, and in a burst each must then win it back from the event
    loop, busy with the very bars being forecast. Inputs stay held by the call's C++ list
    while the program runs, so no op in it lets go of a tensor that Python alone holds (that,
    too, takes the GIL)."""

    def __init__(self, program: nn.Module, rows: int) -> None:
        super().__init__()
        self.program, self.rows = program, rows

    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        n, rows = inputs[0].size(0), self.rows
        outputs: list[list[Tensor]] = []
        for start in range(0, n, rows):
            part: list[Tensor] = []
            for x in inputs:
                chunk = x[start : start + rows]
                short = rows - chunk.size(0)
                if short > 0:  # (TorchScript has no unpacking in a list display)
                    shape = [short] + list(chunk.shape[1:])  # noqa: RUF005
                    chunk = torch.cat([chunk, chunk[-1:].expand(shape)])
                part.append(chunk)
            outputs.append(self.program(part))
        return [torch.cat([out[i] for out in outputs])[:n] for i in range(len(outputs[0]))]


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


class _Step(nn.Module):
    """`TemporalFusionTransformer.step` with the state batch-first, as the engine chunks it."""

    def __init__(self, model: TemporalFusionTransformer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, encoded: Tensor, h: Tensor, c: Tensor, enrichment: Tensor
    ) -> tuple[Tensor, ...]:
        state = (h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous())
        (h, c), keys, values = self.model.step(encoded, state, enrichment)
        return h.transpose(0, 1), c.transpose(0, 1), keys, values


class _Decode(nn.Module):
    """`TemporalFusionTransformer.decode`'s quantiles from a stream's carried state;
    explaining, also the attention and future weights, as `_Forward`'s."""

    def __init__(self, model: TemporalFusionTransformer, explain: bool = False) -> None:
        super().__init__()
        self.model, self.explain = model, explain

    def forward(
        self, keys: Tensor, values: Tensor, *state_static_future: Tensor
    ) -> Tensor | tuple[Tensor, ...]:
        h, c, selection, enrichment, future = state_static_future
        static = StaticContext(selection, enrichment, selection, selection, selection)
        state = (h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous())
        out = self.model.decode(state, keys, values, static, future)
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
    rows = (forward_rows, encode_rows)
    if model.config.encoder == "stream":
        return _stream_programs(model, device, precision, forward_rows, encode_rows, explain)
    forward, encode = _Listed(_Forward(model, explain)), _Listed(_Encode(model, explain))
    if device.type != "cpu" or precision != "fp32":
        return ChunkPrograms(
            Chunks(forward.eval(), forward_rows), Chunks(encode.eval(), encode_rows), *rows
        )
    c = model.config
    state = [torch.zeros(forward_rows, c.hidden) for _ in range(4)]
    window = torch.zeros(forward_rows, c.lookback, c.hidden)
    future = torch.zeros(forward_rows, c.horizon, c.n_future)
    steps, selection = torch.zeros(encode_rows, 1, c.n_hist), torch.zeros(encode_rows, c.hidden)
    with _tracing():
        # Expected: the deprecation, and shape-derived Python ints frozen into the trace.
        return ChunkPrograms(
            _scripted(forward, [window, *state, future]),
            _scripted(encode, [steps, selection]),
            *rows,
        )


def _stream_programs(
    model: TemporalFusionTransformer,
    device: torch.device,
    precision: str,
    forward_rows: int,
    encode_rows: int,
    explain: bool,
) -> ChunkPrograms:
    """The streaming encoder's programs: steps run in chunks of `forward_rows` rows too."""
    rows = (forward_rows, encode_rows)
    decode, step = _Listed(_Decode(model, explain)), _Listed(_Step(model))
    encode = _Listed(_Encode(model, explain))
    if device.type != "cpu" or precision != "fp32":
        chunks = [Chunks(p.eval(), forward_rows) for p in (decode, step)]
        return ChunkPrograms(chunks[0], Chunks(encode.eval(), encode_rows), *rows, chunks[1])
    c, n = model.config, forward_rows
    d_head = c.hidden // c.heads
    state = [torch.zeros(n, c.lstm_layers, c.hidden) for _ in range(2)]
    context = [torch.zeros(n, c.hidden) for _ in range(2)]
    future = torch.zeros(n, c.horizon, c.n_future)
    ring = (torch.zeros(n, c.lookback, c.hidden), torch.zeros(n, c.lookback, d_head))
    steps, selection = torch.zeros(encode_rows, 1, c.n_hist), torch.zeros(encode_rows, c.hidden)
    with _tracing():
        return ChunkPrograms(
            _scripted(decode, [*ring, *state, *context, future]),
            _scripted(encode, [steps, selection]),
            forward_rows,
            encode_rows,
            _scripted(step, [torch.zeros(n, 1, c.hidden), *state, context[0]]),
        )


@contextmanager
def _tracing() -> Iterator[None]:
    with torch.no_grad(), warnings.catch_warnings():
        # Expected: the deprecation, and shape-derived Python ints frozen into the trace.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # No check_trace: it reruns each program on these zeros against eager mode, twice the
        # tracing's cost at every load and reload; the engine's tests hold the programs to eager
        # mode on real windows, bit for bit.
        yield


@cache
def chunk_pool(threads: int) -> ThreadPoolExecutor | None:
    """The threads that run `threads` chunks at once (None: one, the caller's), one pool per
    process for every engine: hot reloads and canaries share it."""
    return ThreadPoolExecutor(threads, "barcast-chunks") if threads > 1 else None


def _scripted(program: _Listed, example: list[Tensor]) -> Chunks:
    """`program` traced on `example` (a chunk's inputs), in a scripted `Chunks` of its rows."""
    traced = torch.jit.trace(program.eval(), (example,), check_trace=False)
    return torch.jit.script(Chunks(traced, example[0].size(0)))


def chunked(
    program: Chunks, *inputs: Tensor, pool: ThreadPoolExecutor | None = None
) -> Tensor | tuple[Tensor, ...]:
    """`program` over the batch `inputs`: its one output, or a tuple of its outputs; with
    `pool`, a chunk per call, side by side on its threads. Only traced programs run there:
    autocast, which eager CUDA programs rely on, holds in the caller's thread alone."""
    rows, n = program.rows, inputs[0].shape[0]
    if pool is None or n <= rows:
        outputs = program(list(inputs))
    else:
        modes = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

        def one(start: int) -> list[Tensor]:
            # the caller's inference and grad modes are its thread's alone
            with torch.inference_mode(modes[0]), torch.set_grad_enabled(modes[1]):
                return program([x[start : start + rows] for x in inputs])

        parts = list(pool.map(one, range(0, n, rows)))
        outputs = [torch.cat(items) for items in zip(*parts, strict=True)]
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def owned_rows(tensor: Tensor, rows: list[int]) -> list[Tensor]:
    """Copies of `tensor`'s `rows`, each owning its memory, made in one call: a call per row
    (a torch op, a numpy copy, even a tensor made from a numpy array) gives the GIL up,
    and in a burst the event loop takes it, so each of a batch's hundreds of rows would wait to
    win it back."""
    return _scripted_copies()(tensor, rows)


def owned_copy(row: np.ndarray) -> np.ndarray:
    """A copy of `row` made holding the GIL: numpy gives it up for any copy, as a tensor op
    does (`owned_rows`)."""
    return np.frombuffer(bytearray(row), row.dtype).reshape(row.shape)


def _copies(tensor: Tensor, rows: list[int]) -> list[Tensor]:
    return [tensor[i].clone() for i in rows]


@cache
def _scripted_copies() -> Callable[[Tensor, list[int]], list[Tensor]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script's, as trace's
        return torch.jit.script(_copies)
