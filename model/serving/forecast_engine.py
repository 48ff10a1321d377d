"""The forecast worker's model side: one checkpoint on one device, with incremental encoding.

In a TFT the variable-selection encoding of a past bar depends only on that bar's features and
the symbol's static context, so when a window slides by one bar, 59 of its 60 step encodings
are already known. They are cached per symbol and only the new bar is encoded; the LSTM,
attention and head still run over the whole window. Pure torch: no Faust, no Kafka; `predict`
runs in the worker's inference thread. `predict_explained` is `predict` with each forecast's
explanation (model.serving.explain) from the same forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor

from features import engine as feature_engine
from model.checkpoint import CheckpointError
from model.forecaster import Forecaster, autocast_for
from model.releases import future_names, known_future
from model.serving.baselines import BaselineSpec, ShadowBaselines
from model.serving.explain import ExplainArrays, explanations, reduced
from model.serving.programs import (
    ENCODE_ROWS,
    FORWARD_ROWS,
    STATIC_ROWS,
    ChunkPrograms,
    Chunks,
    chunk_pool,
    chunk_programs,
    chunked,
    owned_copy,
    owned_rows,
)
from model.serving.streaming import Dims, SymbolStream, advance, continues
from model.tft import StaticContext, TemporalFusionTransformer


class ServingSettings(Protocol):
    """What the engine reads of the worker's settings (streams.settings.Settings)."""

    @property
    def device(self) -> str: ...

    @property
    def max_batch(self) -> int: ...

    @property
    def explain(self) -> bool: ...

    @property
    def inference_threads(self) -> int: ...


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
    raw_symbol: str | None = None  # the bar's contract, when keyed by a continuous symbol
    # The symbol's shadow EWMA variances with this row in (model.serving.baselines; None: not
    # defined yet, or no baselines scored)
    variances: tuple[float, float] | None = None
    canary: str | None = None  # the model id of a canary to forecast it too (None: none)
    offset: int = 0  # the row's source offset: a stored stream is as of it


class Scale(NamedTuple):
    """A batch's windows' volatility scale (`ForecastEngine.scale`)."""

    inputs: np.ndarray  # (B, lookback, k): the rows' `volatility.columns`
    values: np.ndarray  # (B, horizon): log-return units


@dataclass(slots=True)
class _Cached:
    count: int
    encoded: Tensor  # (lookback, hidden), oldest first
    newest: np.ndarray  # the raw values of row `count`: a later window holds it, or restarted
    # (lookback, n_hist) selection weights, kept only by explained batches: 54 KB a symbol in
    # fp32 (the encodings take 30 KB at hidden 128), so a worker that never explains pays none
    weights: Tensor | None = None

    def continued_by(self, request: WindowRequest) -> bool:
        return continues(self.count, self.newest, request)


@dataclass
class Served:
    """A validated checkpoint on its device, with the caches that belong to its weights."""

    forecaster: Forecaster
    path: Path
    programs: ChunkPrograms
    baselines: ShadowBaselines  # the checkpoint's shadow baselines
    cache: dict[str, _Cached] = field(default_factory=dict)
    static: dict[str, StaticContext] = field(default_factory=dict)
    explaining: ChunkPrograms | None = None  # `programs` that also return explain outputs
    streams: dict[str, SymbolStream] = field(default_factory=dict)  # a stream encoder's


@dataclass(slots=True)
class _Pass:
    """One forward pass over a batch: its model outputs and, explaining, what explains them."""

    quantiles: Tensor
    arrays: ExplainArrays | None = None


class ForecastEngine:
    def __init__(
        self,
        path: Path,
        device: str = "cpu",
        padded: bool = True,
        explain: bool = False,
        threads: int = 1,
    ) -> None:
        """`padded`: fixed chunks of FORWARD_ROWS windows and ENCODE_ROWS steps, so that any
        batch composition gives the same forecasts; else chunks of one (one window per call).
        `explain`: prepare the explaining programs with each checkpoint, not on the first
        `predict_explained` (tracing them takes the inference thread a while). `threads`: a
        batch's chunks run on that many threads at once on CPU (model.serving.programs)."""
        self.device_setting = device
        self.padded = padded
        self.explain = explain
        self.pool = chunk_pool(threads)
        self.served = self.prepare(path)

    @classmethod
    def from_settings(cls, path: Path, settings: ServingSettings) -> ForecastEngine:
        padded, threads = settings.max_batch > 1, settings.inference_threads
        return cls(path, settings.device, padded, settings.explain, threads)

    def prepare(self, path: Path) -> Served:
        """Load and validate a checkpoint (refusing another feature set) onto our device."""
        fingerprint = feature_engine.FINGERPRINT
        forecaster = Forecaster(path, device=self.device_setting, expected_fingerprint=fingerprint)
        rows = (FORWARD_ROWS, ENCODE_ROWS) if self.padded else (1, 1)
        programs = chunk_programs(forecaster.model, forecaster.device, forecaster.precision, *rows)
        meta = forecaster.meta
        try:
            spec = BaselineSpec.load(path, meta.config.horizon, len(meta.config.quantiles))
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        served = Served(forecaster, path, programs, ShadowBaselines(meta, spec))
        if self.explain:
            self._explaining(served)
        return served

    def _explaining(self, served: Served) -> ChunkPrograms:
        if served.explaining is None:
            f, plain = served.forecaster, served.programs
            rows = (plain.forward_rows, plain.encode_rows)
            served.explaining = chunk_programs(f.model, f.device, f.precision, *rows, explain=True)
        return served.explaining

    def swap(self, served: Served) -> None:
        self.served = served  # the new one starts with an empty step-encoding cache

    def evict(self, symbol: str) -> None:
        """Drop `symbol`'s caches (it expired: no request of it is under way)."""
        for cache in (self.served.cache, self.served.static, self.served.streams):
            cache.pop(symbol, None)

    @property
    def device(self) -> torch.device:
        return self.served.forecaster.device

    @property
    def model_id(self) -> str:
        return self.served.forecaster.model_id

    @property
    def streams(self) -> dict[str, SymbolStream] | None:
        """A stream encoder's per-symbol streams (None: the window encoder keeps none)."""
        return self.served.streams if self.served.programs.step is not None else None

    @property
    def fingerprint(self) -> str:
        return self.served.forecaster.fingerprint

    @property
    def lookback(self) -> int:
        return self.served.forecaster.config.lookback

    @property
    def horizon(self) -> int:
        return self.served.forecaster.config.horizon

    @property
    def quantiles(self) -> tuple[float, ...]:
        return self.served.forecaster.config.quantiles

    @property
    def n_features(self) -> int:
        return self.served.forecaster.config.n_hist

    def predict(
        self, batch: list[WindowRequest], incremental: bool = True, scale: Scale | None = None
    ) -> np.ndarray:
        """Quantiles of the cumulative log return, `(B, horizon, n_quantiles)` float64;
        `scale`: the batch's `scale`, if the caller has it already.

        A symbol may appear several times in one batch (a replay catching up); every row that
        any of its windows needs is encoded once, then the windows are gathered from them.
        """
        quantiles = self._pass(batch, incremental, explain=False).quantiles
        return self._returns(batch, quantiles, scale)

    def predict_explained(
        self,
        batch: list[WindowRequest],
        incremental: bool = True,
        top_k: int = 10,
        scale: Scale | None = None,
    ) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """`predict`'s quantiles (bit-identical) and one explanation per window, from the same
        forward pass: its `top_k` historical features and the fields model.serving.explain
        documents. Incremental, cached rows' selection weights come from the cache (a symbol
        cached by `predict`, which keeps none, has its window encoded again once)."""
        run = self._pass(batch, incremental, explain=True)
        assert run.arrays is not None
        names = future_names(self.served.forecaster.config.releases)
        return self._returns(batch, run.quantiles, scale), explanations(
            run.arrays, top_k, future_names=names
        )

    def scale(self, batch: list[WindowRequest]) -> Scale:
        """The checkpoint's volatility scale of the batch's windows: the units of its
        forecasts, and the shadow baselines' starting point, so computed once for both."""
        meta = self.served.forecaster.meta
        inputs = meta.volatility.inputs([r.values for r in batch])
        ts = np.array([r.ts_event for r in batch], dtype=np.int64)
        return Scale(inputs, meta.volatility.scale(ts, inputs, self.horizon))

    def shadow(
        self, batch: list[WindowRequest], scale: Scale | None = None
    ) -> dict[str, np.ndarray]:
        """Each shadow baseline's quantiles `(B, H, Q)` of the batch's windows, NaN where one is
        not defined (model.serving.baselines); `scale`: the batch's `scale`, if known."""
        nan = (np.nan, np.nan)
        ts = np.array([r.ts_event for r in batch], dtype=np.int64)
        variances = np.array([nan if r.variances is None else r.variances for r in batch])
        scale = self.scale(batch) if scale is None else scale
        return self.served.baselines.forecast(ts, scale.values, variances)

    def _pass(self, batch: list[WindowRequest], incremental: bool, explain: bool) -> _Pass:
        served = self.served
        model = served.forecaster.model
        programs = self._explaining(served) if explain else served.programs
        with torch.inference_mode(), autocast_for(self.device):
            static = self._static(model, served, [r.symbol for r in batch])
            ts = np.array([r.ts_event for r in batch])
            unique, inverse = np.unique(ts, return_inverse=True)  # a burst shares one minute
            calendar = served.forecaster.calendar
            future = self._tensor(known_future(unique, self.horizon, calendar)[inverse])
            if programs.step is not None:
                return self._streamed(served, programs, batch, incremental, future, static)
            encoded, weights = self._windows(served, programs, batch, incremental, explain)
            out = self._chunked(programs.forward, encoded, *static[:4], future)
            if not explain:
                return _Pass(out)
            assert weights is not None
            return _Pass(out[0], reduced(weights, static.weights, *out[1:]))

    def _returns(
        self, batch: list[WindowRequest], quantiles: Tensor, scale: Scale | None
    ) -> np.ndarray:
        outputs = quantiles.float().cpu().numpy().astype(np.float64)
        scale = self.scale(batch) if scale is None else scale
        return self.served.forecaster.meta.scaled(outputs, scale.values, scale.inputs)

    def _static(
        self, model: TemporalFusionTransformer, served: Served, symbols: list[str]
    ) -> StaticContext:
        """Static contexts per symbol, computed once each. Some kernels round a row by its
        position in the batch, so each symbol's is computed alone in a chunk of its own."""
        for symbol in dict.fromkeys(symbols):
            if symbol not in served.static:
                ids, reals = served.forecaster.meta.vocab.encode([symbol] * STATIC_ROWS)
                context = model.static_context(self._tensor(ids), self._tensor(reals))
                # a copy: a view would keep all STATIC_ROWS rows alive for every symbol
                served.static[symbol] = StaticContext(*(t[:1].clone() for t in context))
        rows = [served.static[symbol] for symbol in symbols]
        return StaticContext(*(torch.cat(parts) for parts in zip(*rows, strict=True)))

    def _windows(
        self,
        served: Served,
        programs: ChunkPrograms,
        batch: list[WindowRequest],
        incremental: bool,
        explain: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """(B, lookback, hidden) and, explaining, the rows' selection weights (B, lookback,
        n_hist): each row a window needs comes from its symbol's cached window or, when not
        there, is encoded now (once, in one call across symbols); the windows are then one
        gather from those rows."""
        lookback = self.lookback
        firsts = {r.symbol: r for r in reversed(batch)}  # each symbol's first, oldest request
        symbols = list(dict.fromkeys(r.symbol for r in batch))
        cached = [
            c if incremental and (c := served.cache.get(s)) and c.continued_by(firsts[s]) else None
            for s in symbols
        ]
        if explain:  # a window cached without its weights is encoded again
            cached = [None if c is None or c.weights is None else c for c in cached]
        blocks = [c.encoded for c in cached if c is not None]
        weight_blocks = [c.weights for c in cached if c is not None and c.weights is not None]
        # Per symbol: the row numbers its cache holds (an empty range if none) and where they
        # start once the cached windows are stacked.
        first = np.array([1 if c is None else c.count - lookback + 1 for c in cached])
        last = np.array([0 if c is None else c.count for c in cached])
        start = lookback * np.cumsum([0] + [c is not None for c in cached])[:-1]

        position = {symbol: i for i, symbol in enumerate(symbols)}
        owner = np.array([position[r.symbol] for r in batch])[:, None]
        rows = np.array([r.count for r in batch])[:, None] + np.arange(1 - lookback, 1)
        index = start[owner] + rows - first[owner]
        new = (rows < first[owner]) | (rows > last[owner])
        if new.any():
            # (symbol, row) keys sort by symbol, then row: np.unique finds each new row once.
            stride = int(rows.max()) + 1
            keys = (owner * stride + rows)[new]
            unique, seen = np.unique(keys, return_index=True)
            window, step = np.divmod(np.flatnonzero(new)[seen], lookback)
            values = np.stack([batch[i].values[j] for i, j in zip(window, step, strict=True)])
            selection = torch.cat([served.static[symbols[k]].selection for k in unique // stride])
            x = self._tensor(served.forecaster.meta.normalizer.apply(values[:, None, :]))
            index[new] = lookback * len(blocks) + np.searchsorted(unique, keys)
            encoded = self._chunked(programs.encode, x, selection)
            if explain:
                encoded, weights = encoded
                weight_blocks.append(weights[:, 0])
            blocks.append(encoded[:, 0])
        at = self._tensor(index)
        windows = torch.cat(blocks)[at]
        selected = torch.cat(weight_blocks)[at] if explain else None
        latest = list({r.symbol: i for i, r in enumerate(batch)}.values())
        # a symbol's last window stays, copied, so that it does not keep the whole batch alive
        kept = [None] * len(latest) if selected is None else owned_rows(selected, latest)
        for i, window, weights in zip(latest, owned_rows(windows, latest), kept, strict=True):
            newest = owned_copy(batch[i].values[-1])
            served.cache[batch[i].symbol] = _Cached(batch[i].count, window, newest, weights)
        return windows, selected

    def _streamed(
        self,
        served: Served,
        programs: ChunkPrograms,
        batch: list[WindowRequest],
        incremental: bool,
        future: Tensor,
        static: StaticContext,
    ) -> _Pass:
        """The streaming encoder's pass (model.serving.streaming), stepped by the plain programs;
        explaining (`programs` the explaining ones), the rows' selection weights come as the
        window encoder's (`_windows`): a row's depend on it and its symbol, not on the state."""
        config, normalizer = served.forecaster.config, served.forecaster.meta.normalizer
        plain = served.programs

        def encode(values: np.ndarray, selection: Tensor) -> Tensor:
            x = self._tensor(normalizer.apply(values[:, None, :]))
            return self._chunked(plain.encode, x, selection)

        def step(*inputs: Tensor) -> tuple[Tensor, ...]:
            assert plain.step is not None
            return self._chunked(plain.step, *inputs)

        carried = advance(served.streams, batch, static, encode, step, Dims.of(config), incremental)
        inputs = (*carried, static.selection, static.enrichment, future)
        out = self._chunked(programs.forward, *inputs)
        if programs is plain:
            return _Pass(out)
        _, weights = self._windows(served, programs, batch, incremental, explain=True)
        assert weights is not None
        return _Pass(out[0], reduced(weights, static.weights, *out[1:]))

    def _chunked(self, program: Chunks, *inputs: Tensor) -> Any:
        """`chunked` on the engine's threads where its programs are traced (CPU: fp32)."""
        return chunked(program, *inputs, pool=self.pool if self.device.type == "cpu" else None)

    def _tensor(self, array: np.ndarray) -> Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if tensor.is_floating_point():
            tensor = tensor.float()
        return tensor.to(self.device)
