"""The forecast worker's model side: one checkpoint on one device, with incremental encoding.

In a TFT the variable-selection encoding of a past bar depends only on that bar's features and
the symbol's static context, so when a window slides by one bar, 59 of its 60 step encodings
are already known. They are cached per symbol and only the new bar is encoded; the LSTM,
attention and head still run over the whole window. Pure torch: no Faust, no Kafka; `predict`
runs in the worker's inference thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from features import engine as feature_engine
from model import checkpoint
from model.checkpoint import CheckpointMeta
from model.covariates import future_covariates
from model.tft import StaticContext, TemporalFusionTransformer
from streams.settings import Settings

# Matrix kernels pick their code path (and so their rounding) by shape. Running the model only
# on fixed-size row chunks, padded, makes every forecast bit-identical whatever else shared its
# micro-batch: a restarted worker, a replay with other timing or max_batch=1 all agree exactly,
# and a step encoded incrementally equals the same step encoded within a whole window.
ENCODE_ROWS = 128
FORWARD_ROWS = 32


@dataclass(slots=True)
class WindowRequest:
    symbol: str
    key: bytes
    partition: int
    count: int  # rows the symbol's window has seen; the newest row is number `count`
    values: np.ndarray  # (lookback, n_features) float64, oldest first
    ts_event: int
    close: float
    received_ns: int


@dataclass(slots=True)
class _Cached:
    count: int
    encoded: Tensor  # (lookback, hidden), oldest first


@dataclass
class Served:
    """A validated checkpoint placed on its device."""

    model: nn.Module
    meta: CheckpointMeta
    model_id: str
    path: Path
    cache: dict[str, _Cached] = field(default_factory=dict)
    static: dict[str, StaticContext] = field(default_factory=dict)


def _chunked(rows: int, fn, *inputs: Tensor):  # type: ignore[no-untyped-def]
    """fn over row chunks of exactly `rows` (the last padded by repeating its final row)."""
    n = inputs[0].shape[0]
    outputs = []
    for start in range(0, n, rows):
        part = [x[start : start + rows] for x in inputs]
        short = rows - part[0].shape[0]
        if short:
            part = [torch.cat([p, p[-1:].expand(short, *p.shape[1:])]) for p in part]
        out = fn(*part)
        outputs.append(out if not short else _head(out, rows - short))
    if isinstance(outputs[0], tuple):
        return type(outputs[0])(*(torch.cat(items) for items in zip(*outputs, strict=True)))
    return torch.cat(outputs)


def _head(out, n: int):  # type: ignore[no-untyped-def]
    if isinstance(out, tuple):
        return type(out)(*(o[:n] for o in out))
    return out[:n]


def pick_device(setting: str) -> torch.device:
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("BARCAST_DEVICE=cuda but torch sees no CUDA device; use auto or cpu")
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


class ForecastEngine:
    def __init__(self, path: Path, device: torch.device, int8: bool = False) -> None:
        self.device = device
        self.int8 = int8 and device.type == "cpu"  # CUDA serves bf16
        self.served = self.prepare(path)

    @classmethod
    def from_settings(cls, path: Path, settings: Settings) -> ForecastEngine:
        return cls(path, pick_device(settings.device), settings.cpu_precision == "int8")

    def prepare(self, path: Path) -> Served:
        """Load and validate a checkpoint (refusing another feature set) onto our device."""
        model, meta, model_id = checkpoint.load(path, feature_engine.FINGERPRINT)
        if self.int8:
            model = torch.ao.quantization.quantize_dynamic(
                model, {nn.Linear, nn.LSTM}, dtype=torch.qint8
            )
        return Served(model.to(self.device).eval(), meta, model_id, path)

    def swap(self, served: Served) -> None:
        self.served = served  # the new one starts with an empty step-encoding cache

    @property
    def model_id(self) -> str:
        return self.served.model_id

    @property
    def fingerprint(self) -> str:
        return self.served.meta.feature_fingerprint

    @property
    def lookback(self) -> int:
        return self.served.meta.config.lookback

    @property
    def horizon(self) -> int:
        return self.served.meta.config.horizon

    @property
    def quantiles(self) -> tuple[float, ...]:
        return self.served.meta.config.quantiles

    @property
    def n_features(self) -> int:
        return self.served.meta.config.n_hist

    def predict(self, batch: list[WindowRequest], incremental: bool = True) -> np.ndarray:
        """Quantiles of the cumulative log return, `(B, horizon, n_quantiles)` float64.

        A symbol may appear several times in one batch (a replay); its requests are taken in
        order, each in a later round, so every one can reuse the previous one's encodings.
        """
        served = self.served
        out = np.empty((len(batch), self.horizon, len(self.quantiles)), dtype=np.float64)
        rounds: list[list[int]] = []
        seen: dict[str, int] = {}
        for i, request in enumerate(batch):
            depth = seen.get(request.symbol, 0)
            seen[request.symbol] = depth + 1
            if depth == len(rounds):
                rounds.append([])
            rounds[depth].append(i)
        with torch.inference_mode(), self._autocast():
            for indices in rounds:
                requests = [batch[i] for i in indices]
                out[indices] = self._forecast(served, requests, incremental)
        return out

    def _forecast(
        self, served: Served, requests: list[WindowRequest], incremental: bool
    ) -> np.ndarray:
        model: TemporalFusionTransformer = served.model  # type: ignore[assignment]
        meta = served.meta
        static = self._static(model, served, [r.symbol for r in requests])
        encoded = self._encodings(model, served, requests, static, incremental)
        future = future_covariates(np.array([r.ts_event for r in requests]), self.horizon)
        quantiles = _chunked(
            FORWARD_ROWS,
            lambda e, f, *s: model.forward_encoded(e, StaticContext(*s), f).quantiles,
            encoded,
            self._tensor(future),
            *static,
        )
        return quantiles.float().cpu().numpy().astype(np.float64) * meta.target_scale

    def _static(
        self, model: TemporalFusionTransformer, served: Served, symbols: list[str]
    ) -> StaticContext:
        """Static contexts per symbol, computed once each. Some kernels round a row by its
        position in the batch, so each symbol's is computed alone in a chunk of its own."""
        for symbol in dict.fromkeys(symbols):
            if symbol not in served.static:
                ids, reals = served.meta.vocab.encode([symbol] * FORWARD_ROWS)
                context = model.static_context(self._tensor(ids), self._tensor(reals))
                served.static[symbol] = StaticContext(*(t[:1] for t in context))
        rows = [served.static[symbol] for symbol in symbols]
        return StaticContext(*(torch.cat(parts) for parts in zip(*rows, strict=True)))

    def _encodings(
        self,
        model: TemporalFusionTransformer,
        served: Served,
        requests: list[WindowRequest],
        static: StaticContext,
        incremental: bool,
    ) -> Tensor:
        """(B, lookback, hidden): cached steps plus the new ones, or whole windows on a miss."""
        normalize = served.meta.normalizer.apply
        step, full = [], []
        for i, request in enumerate(requests):
            cached = served.cache.get(request.symbol) if incremental else None
            if cached is not None and cached.count == request.count - 1:
                step.append(i)
            elif cached is None or cached.count != request.count:
                full.append(i)
        windows: dict[int, Tensor] = {}
        if full:
            x = self._tensor(normalize(np.stack([requests[i].values for i in full])))
            encoded = self._encode(model, x, static.selection[full])
            windows.update(zip(full, encoded, strict=True))
        if step:
            x = self._tensor(normalize(np.stack([requests[i].values[-1:] for i in step])))
            encoded = self._encode(model, x, static.selection[step])
            for i, new in zip(step, encoded, strict=True):
                old = served.cache[requests[i].symbol].encoded
                windows[i] = torch.cat([old[1:], new], dim=0)
        stacked = []
        for i, request in enumerate(requests):
            window = windows.get(i)
            if window is None:
                window = served.cache[request.symbol].encoded
            served.cache[request.symbol] = _Cached(request.count, window)
            stacked.append(window)
        return torch.stack(stacked)

    def _encode(self, model: TemporalFusionTransformer, x: Tensor, selection: Tensor) -> Tensor:
        """(n, T, F) -> (n, T, hidden), every step encoded on its own in fixed-size chunks."""
        n, t, f = x.shape
        steps = x.reshape(n * t, 1, f)
        context = selection.repeat_interleave(t, dim=0)
        encoded = _chunked(ENCODE_ROWS, lambda a, b: model.encode_history(a, b)[0], steps, context)
        return encoded.reshape(n, t, -1)

    def _tensor(self, array: np.ndarray) -> Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if tensor.is_floating_point():
            tensor = tensor.float()
        return tensor.to(self.device)

    def _autocast(self) -> torch.autocast:
        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"
        )
