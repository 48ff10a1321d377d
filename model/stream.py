"""The streaming encoder's training and evaluation forward (`TFTConfig(encoder="stream")`).

A streaming TFT carries its encoder LSTM's state from bar to bar of a symbol instead of
rerunning it over each forecast's lookback from the static state, and each past position's
attention key and value are computed once, when its bar arrives (`TemporalFusionTransformer.
step`); a forecast attends over the keys and values of its `lookback` newest positions, as the
window encoder's does. A stream starts at the first warm bar of its symbol's run of warm bars
(the worker: at the first window it forecasts), in the static state.

Training runs contiguous sequences of `SEGMENTS` x lookback bars with the state carried and
backpropagates through one segment of lookback bars at most (truncated backpropagation through
time): the state and the keys and values a segment receives from the one before are constants
to it. Every position with a valid window of its own is forecast and scored. Evaluation gives a
window the stream over `BURN_IN` x lookback bars before its own (fewer where its symbol's warm
run starts later): the state has carried that far when its bars are forecast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from model.dataset import WindowData, drop_symbols
from model.releases import known_future
from model.tft import StaticContext, TemporalFusionTransformer

SEGMENTS = 3  # a training sequence's segments of lookback bars
BURN_IN = 1  # lookbacks of bars streamed before an evaluated window's own


@dataclass
class Sequences:
    """Contiguous bars of symbols, right-aligned, and the positions forecast in them."""

    symbol: Tensor  # (B,) int64 embedding rows
    static_reals: Tensor  # (B, n_static - 1)
    rows: Tensor  # (U, n_hist) the distinct normalized feature rows of started positions
    index: Tensor  # (B, T) each position's row (0 before its sequence starts: never read)
    row_sequence: Tensor  # (U,) a sequence holding each row (for its static context)
    started: Tensor  # (B, T) bool: the sequence has started (before: the static state)
    forecast: Tensor  # (B, T) bool: positions forecast, N in all
    x_future: Tensor  # (N, horizon, n_future), positions in row-major order of `forecast`
    y: Tensor  # (N, horizon) log returns / target_scale
    unit: Tensor  # (N, horizon) the volatility scale / target_scale

    def symbols_dropped(self, p: float) -> Tensor:
        return drop_symbols(self.symbol, p)


def sequences(
    data: WindowData, last: np.ndarray, length: int, ends: np.ndarray | None
) -> Sequences:
    """Sequences of up to `length` bars ending at rows `last`, each starting no earlier than its
    warm run; positions forecast: rows of `ends` (sorted) with a whole window in the sequence,
    or (None) each sequence's last."""
    last = np.asarray(last, dtype=np.int64)
    rows = last[:, None] + np.arange(1 - length, 1)
    first = np.maximum(rows[:, 0], data.run_start[last])
    started = rows >= first[:, None]
    if ends is None:
        forecast = np.zeros_like(started)
        forecast[:, -1] = True
    else:
        at = np.clip(np.searchsorted(ends, rows), 0, max(len(ends) - 1, 0))
        forecast = (ends[at] == rows) if len(ends) else np.zeros_like(started)
    forecast &= rows >= first[:, None] + data.lookback - 1
    panel, picked = data.panel, rows[forecast]
    # Sequences of nearby ends share most bars: each distinct row is normalized and encoded
    # once (as model.dataset.Batch's), not once per sequence holding it
    distinct, inverse = np.unique(rows[started], return_inverse=True)
    index = np.zeros(rows.shape, dtype=np.int64)
    index[started] = inverse
    row_sequence = np.empty(len(distinct), dtype=np.int64)
    row_sequence[inverse] = np.nonzero(started)[0]
    symbol = np.searchsorted(panel.offsets, last, side="right") - 1
    return Sequences(
        symbol=data.symbol_ids[symbol],
        static_reals=data.symbol_reals[symbol],
        rows=torch.from_numpy(data.normalizer.apply(panel.features[distinct])),
        index=torch.from_numpy(index),
        row_sequence=torch.from_numpy(row_sequence),
        started=torch.from_numpy(started),
        forecast=torch.from_numpy(forecast),
        x_future=torch.from_numpy(known_future(panel.ts[picked], data.horizon, data.calendar)),
        y=torch.from_numpy((panel.targets[picked] / data.target_scale).astype(np.float32)),
        unit=data.unit[torch.from_numpy(picked)],
    )


def training_sequences(data: WindowData, ends: np.ndarray, train_ends: np.ndarray) -> Sequences:
    """A training step's sequences: one per lookback of its windows `ends` (as many forecasts
    as a window step's), each ending at one of them; `train_ends` sorted."""
    return sequences(data, ends[:: data.lookback], SEGMENTS * data.lookback, train_ends)


def evaluation_sequences(data: WindowData, ends: np.ndarray, burn_in: int = BURN_IN) -> Sequences:
    """Each window of `ends` at the end of its own sequence, the only position forecast, its
    stream started `burn_in` lookbacks before it (later where its warm run starts later)."""
    length = (burn_in + 1) * data.lookback
    return sequences(data, ends, length, None)


def forward_sequences(
    model: TemporalFusionTransformer, batch: Sequences, symbol: Tensor, device: torch.device
) -> Tensor:
    """The quantiles `(N, horizon, n_quantiles)` of the positions `batch.forecast`."""
    lookback = model.config.lookback
    static = model.static_context(symbol.to(device), batch.static_reals.to(device))
    selection = static.selection[batch.row_sequence.to(device)]
    encoded, _ = model.encode_history(batch.rows.unsqueeze(1).to(device), selection)
    encoded = encoded[:, 0][batch.index.to(device)]
    started = batch.started.to(device)
    initial = state = model.initial_state(static)
    outputs, states = [], []
    for t in range(encoded.shape[1]):
        if t and t % lookback == 0:  # a new segment: what it receives is a constant to it
            state = (state[0].detach(), state[1].detach())
        out, stepped = model.encoder(encoded[:, t : t + 1], state)
        keep = started[None, :, t, None]
        state = (
            torch.where(keep, stepped[0], initial[0]),
            torch.where(keep, stepped[1], initial[1]),
        )
        outputs.append(out)
        states.append(state)
    keys, values = model.remember(torch.cat(outputs, dim=1), encoded, static.enrichment)

    seq, pos = batch.forecast.to(device).nonzero(as_tuple=True)
    window = pos[:, None] + torch.arange(1 - lookback, 1, device=device)
    older = (window // lookback < (pos // lookback)[:, None]).unsqueeze(-1)
    keys = torch.where(older, keys.detach()[seq[:, None], window], keys[seq[:, None], window])
    values = torch.where(older, values.detach()[seq[:, None], window], values[seq[:, None], window])
    # (T, layers, B, hidden) indexed at (pos, :, seq): (N, layers, hidden)
    h = torch.stack([s[0] for s in states])[pos, :, seq].transpose(0, 1).contiguous()
    c = torch.stack([s[1] for s in states])[pos, :, seq].transpose(0, 1).contiguous()
    picked = StaticContext(*(part[seq] for part in static))
    out = model.decode((h, c), keys, values, picked, batch.x_future.to(device))
    return out.quantiles
