"""The forecast worker's streaming encoder (`TFTConfig(encoder="stream")`, model.stream): each
symbol's encoder state and the ring of its `lookback` newest positions' attention keys and
values, carried from bar to bar, so a new bar costs one encoder step, and a forecast the
decoder and the attention of the future positions.

A request's rows not yet stepped (the bars since its symbol's last forecast: gap fills, bars
of a replay that shared the batch) are stepped in order; one whose window does not continue
its symbol's stream (the first, or after `lookback` bars without a forecast, or rows stored
anew) starts the stream again from its window's oldest row in the static state, as a stream
starts in training. Every step runs in fixed-size chunks (model.serving.forecast_engine), so a
symbol's forecasts are bit-identical however its bars were batched, and equal a recomputation
of its stream from the start.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor

from model.serving.programs import owned_copy, owned_rows
from model.tft import StaticContext

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from model.config import TFTConfig


class WindowRequest(Protocol):
    """What a stream reads of a forecast request (model.serving.forecast_engine)."""

    symbol: str
    count: int  # rows its symbol's window has seen; the newest row is number `count`
    values: np.ndarray  # (lookback, n_features), oldest first


_HEAD = struct.Struct("<qiiiii")  # count, layers, hidden, lookback, d_head, features
_LENGTH = struct.Struct("<I")


class Dims(NamedTuple):
    """A stream's sizes, and where its parts sit in its carried state (`SymbolStream`)."""

    layers: int
    hidden: int
    lookback: int
    d_head: int

    @classmethod
    def of(cls, config: TFTConfig) -> Dims:
        """A stream's sizes under the model `config`."""
        c = config
        return cls(c.lstm_layers, c.hidden, c.lookback, c.hidden // c.heads)

    @property
    def state(self) -> int:
        """The LSTM state's values: h, then c, each `(layers, hidden)`."""
        return 2 * self.layers * self.hidden

    @property
    def slot(self) -> int:
        """A ring slot's values: a row's attention key `(hidden,)`, then its value `(d_head,)`."""
        return self.hidden + self.d_head

    @property
    def size(self) -> int:
        return self.state + self.lookback * self.slot


@dataclass(slots=True)
class SymbolStream:
    """One symbol's carried state on the model's device, as one tensor: the encoder LSTM's h
    and c after row `count`, then the ring of the `lookback` newest rows' attention keys and
    values, row r's in slot (r - 1) % lookback. One tensor, not one per part: a burst makes and
    frees a stream per symbol in the inference thread, and each tensor made or freed there
    takes its turn at the GIL beside the busy event loop (programs.owned_rows). Never changed
    in place (a step makes a new one), so a reference to one keeps it as it was. Stored as a
    head (row count, LSTM state, newest row) and the ring's slots: a new bar changes one slot
    (streams.runtime.stores.StreamStore)."""

    count: int  # the newest row stepped, numbered as its window's rows
    carried: Tensor  # (dims.size,) float32
    dims: Dims
    newest: np.ndarray  # the raw values of row `count`: a later window holds it, or restarted

    def head_bytes(self) -> bytes:
        head = _HEAD.pack(self.count, *self.dims, len(self.newest))
        state = _f4(self.carried)[: self.dims.state]
        return head + state.tobytes() + self.newest.astype("<f8").tobytes()

    def slots_bytes(self, slots: Sequence[int]) -> list[bytes]:
        ring = self._ring()
        return [ring[slot].tobytes() for slot in slots]

    def changed_slots(self, prior: SymbolStream | None) -> list[int]:
        """The ring's slots whose contents differ from `prior`'s (None: every slot)."""
        if prior is None or prior.dims != self.dims:
            return list(range(self.dims.lookback))
        return np.flatnonzero((self._ring() != prior._ring()).any(1)).tolist()

    def _ring(self) -> np.ndarray:
        dims = self.dims
        return _f4(self.carried)[dims.state :].reshape(dims.lookback, dims.slot)

    def to_bytes(self) -> bytes:
        return self.head_bytes() + b"".join(self.slots_bytes(range(self.dims.lookback)))

    @classmethod
    def from_bytes(cls, data: bytes, device: torch.device) -> SymbolStream:
        _, *sizes, features = _HEAD.unpack_from(data)
        dims = Dims(*sizes)
        end = _HEAD.size + 4 * dims.state + 8 * features
        size = 4 * dims.slot
        slots = [data[end + size * slot : end + size * (slot + 1)] for slot in range(dims.lookback)]
        return cls.from_parts(data[:end], slots, device)

    @classmethod
    def from_parts(cls, head: bytes, slots: Sequence[bytes], device: torch.device) -> SymbolStream:
        """The stream of `head_bytes` and its `slots_bytes` of every slot in order."""
        count, *sizes, features = _HEAD.unpack_from(head)
        dims = Dims(*sizes)
        state = head[_HEAD.size : _HEAD.size + 4 * dims.state]
        newest = np.frombuffer(head, dtype="<f8", count=features, offset=_HEAD.size + len(state))
        carried = np.frombuffer(bytearray(state + b"".join(slots)), dtype="<f4")
        return cls(count, torch.from_numpy(carried).to(device), dims, newest.copy())

    @staticmethod
    def lookback_of(head: bytes) -> int:
        return _HEAD.unpack_from(head)[3]

    def to(self, device: torch.device) -> SymbolStream:
        """On `device`: itself if already there (`cuda` is the tensors' `cuda:0`)."""
        carried = self.carried.to(device)
        if carried is self.carried:
            return self
        return SymbolStream(self.count, carried, self.dims, self.newest)

    def continued_by(self, request: WindowRequest) -> bool:
        """Whether `request`'s window holds this stream's newest row and all after it."""
        return continues(self.count, self.newest, request)


def _f4(tensor: Tensor) -> np.ndarray:
    return np.asarray(tensor.detach().float().cpu().numpy(), dtype="<f4")


def heads_bytes(streams: dict[str, SymbolStream]) -> bytes:
    """A symbol's streams' heads in model id order, each id and head behind its length."""
    parts = []
    for model_id, stream in sorted(streams.items()):
        for part in (model_id.encode(), stream.head_bytes()):
            parts += [_LENGTH.pack(len(part)), part]
    return b"".join(parts)


def heads_from_bytes(data: bytes) -> list[tuple[str, bytes]]:
    """`heads_bytes`'s model ids and heads, in order."""
    parts, offset = [], 0
    while offset < len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        parts.append(data[offset + _LENGTH.size : offset + _LENGTH.size + length])
        offset += _LENGTH.size + length
    return [(i.decode(), head) for i, head in zip(parts[::2], parts[1::2], strict=True)]


def continues(count: int, newest: np.ndarray, request: WindowRequest) -> bool:
    """Whether `request`'s window holds row `count` with values `newest`: a window that
    restarted (stored by another feature set, its rows numbered anew over other bars) holds
    rows numbered alike but not the same ones."""
    ahead = request.count - count
    lookback = len(request.values)
    return 0 <= ahead < lookback and np.array_equal(request.values[lookback - 1 - ahead], newest)


class Carried(NamedTuple):
    """Per request: what its forecast decodes from."""

    keys: Tensor  # (B, lookback, hidden), oldest first
    values: Tensor  # (B, lookback, d_head)
    h: Tensor  # (B, layers, hidden)
    c: Tensor


class _Item(NamedTuple):
    symbol: int  # its index among the batch's symbols
    row: int
    values: np.ndarray  # the row's raw features
    restart: bool  # the stream starts again at this row (the static state)
    request: int  # the request whose forecast follows this row (-1: none)


def _items(
    streams: dict[str, SymbolStream], batch: Sequence[WindowRequest], incremental: bool
) -> list[list[_Item]]:
    """Per symbol, the rows to step, in order."""
    lookback = len(batch[0].values)
    symbols = list(dict.fromkeys(r.symbol for r in batch))
    position = {s: i for i, s in enumerate(symbols)}
    items: list[list[_Item]] = [[] for _ in symbols]
    last: dict[str, tuple[int, np.ndarray]] = {
        s: (st.count, st.newest) for s in symbols if incremental and (st := streams.get(s))
    }
    for j, request in enumerate(batch):
        prior = last.get(request.symbol)
        # a row already stepped (a duplicate) restarts too: its forecast needs the state it had
        carry = prior is not None and request.count > prior[0] and continues(*prior, request)
        first = prior[0] + 1 if carry else request.count - lookback + 1  # type: ignore[index]
        k = position[request.symbol]
        for row in range(first, request.count + 1):
            values = request.values[lookback - 1 - (request.count - row)]
            is_last = row == request.count
            items[k].append(_Item(k, row, values, not carry and row == first, j if is_last else -1))
        if incremental:  # else each window is streamed anew, whatever came before in the batch
            last[request.symbol] = (request.count, request.values[-1])
    return items


def advance(
    streams: dict[str, SymbolStream],
    batch: Sequence[WindowRequest],
    static: StaticContext,
    encode: Callable[[np.ndarray, Tensor], Tensor],
    step: Callable[..., tuple[Tensor, ...]],
    dims: Dims,
    incremental: bool,
) -> Carried:
    """Step every row `batch`'s forecasts need, symbol by symbol in order, and keep each
    symbol's stream in `streams`. `encode`: raw rows `(n, F)` and their selection contexts ->
    encodings `(n, 1, hidden)`; `step`: (encodings, h, c, enrichment) -> the next (h, c) `(n,
    layers, hidden)` and the rows' keys and values `(n, 1, .)`, both in fixed-size chunks.
    `static`: the requests' static contexts. Not `incremental`: each window streamed anew from
    its oldest row."""
    per_symbol = _items(streams, batch, incremental)
    # each symbol (in order of first appearance) at one of its requests: its static context
    requests = {r.symbol: j for j, r in enumerate(batch)}
    symbols = list(requests)
    initial = StaticContext(*(part[list(requests.values())] for part in static))
    flat = [item for items in per_symbol for item in items]
    selection = initial.selection[torch.tensor([i.symbol for i in flat])]
    encoded = encode(np.stack([i.values for i in flat]), selection)
    initial_h, initial_c, enrichment = initial.state_h, initial.state_c, initial.enrichment
    carried = _stacked(streams, symbols, initial, dims)
    h, c, keys, values = _parts(carried, dims)
    lookback, n = dims.lookback, len(batch)
    out = Carried(
        keys.new_empty(n, *keys.shape[1:]),
        values.new_empty(n, *values.shape[1:]),
        h.new_empty(n, *h.shape[1:]),
        c.new_empty(n, *c.shape[1:]),
    )
    start = np.cumsum([0] + [len(items) for items in per_symbol])
    ring = torch.arange(lookback)
    for k in range(max(len(items) for items in per_symbol)):
        now = [items[k] for items in per_symbol if len(items) > k]
        at = torch.tensor([i.symbol for i in now])
        flat_at = torch.tensor([start[i.symbol] + k for i in now])
        restart = torch.tensor([i.restart for i in now], device=h.device)[:, None, None]
        h_in = torch.where(restart, initial_h[at, None], h[at])
        c_in = torch.where(restart, initial_c[at, None], c[at])
        # under autocast (CUDA's bf16) the outputs are narrower than the streams: widened, exactly
        outputs = step(encoded[flat_at], h_in, c_in, enrichment[at])
        h[at], c[at], key, value = (t.to(carried.dtype) for t in outputs)
        slots = torch.tensor([(i.row - 1) % lookback for i in now])
        keys[at, slots], values[at, slots] = key[:, 0], value[:, 0]
        forecast = [i for i in now if i.request >= 0]
        if forecast:  # their windows, as of this step: oldest slot first
            s = torch.tensor([i.symbol for i in forecast])
            j = torch.tensor([i.request for i in forecast])
            order = (torch.tensor([i.row for i in forecast])[:, None] + ring) % lookback
            out.keys[j], out.values[j] = keys[s[:, None], order], values[s[:, None], order]
            out.h[j], out.c[j] = h[s], c[s]
    stepped = [s for s, items in enumerate(per_symbol) if items]
    # copies owning their memory, so that a stream does not keep the whole batch alive
    for s, owned in zip(stepped, owned_rows(carried, stepped), strict=True):
        row = per_symbol[s][-1]
        streams[symbols[s]] = SymbolStream(row.row, owned, dims, owned_copy(row.values))
    return out


def _stacked(
    streams: dict[str, SymbolStream], symbols: list[str], initial: StaticContext, dims: Dims
) -> Tensor:
    """The symbols' streams' carried states stacked `(S, dims.size)`; a symbol without one in
    its static state with an empty ring."""
    n = dims.layers * dims.hidden
    carried = initial.state_h.new_zeros(len(symbols), dims.size)
    carried[:, :n] = initial.state_h.repeat(1, dims.layers)
    carried[:, n : 2 * n] = initial.state_c.repeat(1, dims.layers)
    have = [k for k, symbol in enumerate(symbols) if symbol in streams]
    if have:
        stored = torch.stack([streams[symbols[k]].carried for k in have])
        carried[have] = stored.to(carried.dtype)
    return carried


def _parts(carried: Tensor, dims: Dims) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Views of stacked carried states `(S, dims.size)`: h, c `(S, layers, hidden)`, and the
    ring's keys `(S, lookback, hidden)` and values `(S, lookback, d_head)`."""
    n, shape = dims.layers * dims.hidden, (len(carried), dims.layers, dims.hidden)
    ring = carried[:, 2 * n :].view(len(carried), dims.lookback, dims.slot)
    h, c = carried[:, :n].view(shape), carried[:, n : 2 * n].view(shape)
    return h, c, ring[..., : dims.hidden], ring[..., dims.hidden :]
