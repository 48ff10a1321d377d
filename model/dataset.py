"""Training windows: clean bars -> the feature engine in batch -> time splits -> tensors.

A window ending at row t (the last bar the model sees) holds rows t-lookback+1..t as inputs and
the cumulative log returns of the close at t+1..t+horizon as its label. Windows use warm feature
rows only, never span a session break in the label, and never cross a split boundary: train,
validation and test are time ranges, and the first `embargo` (>= lookback + horizon) bars of
validation, of calibration and of test start no window, so no input row or label of one split
is near another's. Validation picks the best epoch; calibration, a split of its own, fits the
q10/q90 interval scale, so the windows that choose the model do not also calibrate it.
A window ends on a real bar, as in serving: the worker never forecasts from a gap fill.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
import torch

from model.bar_files import CleanBars, DataError
from model.covariates import NS_PER_MIN, SymbolVocab
from model.normalization import Normalizer, Relative
from model.releases import ReleaseCalendar, known_future
from model.volatility import TimeOfDayProfile, VolatilityScale, contiguous_returns

NS_PER_DAY = 1440 * NS_PER_MIN


class Part(IntEnum):
    TRAIN = 0
    VAL = 1
    CALIB = 2
    TEST = 3


@dataclass(frozen=True)
class Split:
    """Time boundaries (UTC ns): train < train_end <= val < val_end <= calib < calib_end <=
    test."""

    train_end: int
    val_end: int
    calib_end: int
    embargo: int

    @classmethod
    def from_fractions(
        cls, ts: np.ndarray, val: float, calib: float, test: float, embargo: int
    ) -> Split:
        """Boundaries at fractions of the bars (not of the time span, which weekends skew)."""
        if not (val > 0 and calib > 0 and test >= 0 and val + calib + test < 1):
            raise DataError(
                f"--val-fraction {val} / --calib-fraction {calib} / --test-fraction {test}: "
                "need val > 0, calib > 0, test >= 0 and val + calib + test < 1"
            )
        cuts = np.quantile(np.sort(ts), [1 - val - calib - test, 1 - calib - test, 1 - test])
        train_end, val_end, calib_end = (int(c) for c in cuts)
        return cls(train_end, val_end, calib_end if test > 0 else int(ts.max()) + 1, embargo)

    @property
    def bounds(self) -> tuple[int, int, int]:
        return self.train_end, self.val_end, self.calib_end

    def part_of(self, ts: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.bounds), ts, side="right").astype(np.int8)

    def to_dict(self) -> dict[str, int]:
        return {
            "train_end": self.train_end,
            "val_end": self.val_end,
            "calib_end": self.calib_end,
            "embargo": self.embargo,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Split:
        return cls(*(int(values[k]) for k in ("train_end", "val_end", "calib_end", "embargo")))


@dataclass
class Panel:
    """Every symbol's rows, concatenated; `offsets[i]:offsets[i+1]` are symbol i's rows."""

    symbols: list[str]
    offsets: np.ndarray  # (n_symbols + 1,)
    ts: np.ndarray  # (R,) int64 ns, bar open
    close: np.ndarray  # (R,) float64
    features: np.ndarray  # (R, F) float64, raw feature-engine output
    warm: np.ndarray  # (R,) bool
    targets: np.ndarray  # (R, horizon) float64 log returns; NaN where the label is unavailable
    synthetic: np.ndarray  # (R,) bool: a gap fill of the corrections (O=H=L=C, volume 0)
    feature_names: tuple[str, ...] = ()  # the columns of `features`

    @property
    def row_symbol(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.symbols)), np.diff(self.offsets))


def build_panel(bars: list[CleanBars], horizon: int) -> Panel:
    """Run the feature engine in batch over each symbol's clean bars."""
    from features.engine import FEATURE_NAMES, N_FEATURES, compute_batch

    rows = []
    for b in bars:
        values, warm = compute_batch(
            b.ts_event, b.open, b.high, b.low, b.close, b.volume, b.synthetic
        )
        if values.shape != (len(b), N_FEATURES):
            raise DataError(
                f"feature engine returned {values.shape} for {b.symbol}; "
                f"expected ({len(b)}, {N_FEATURES})"
            )
        rows.append((b.ts_event, b.close, values, np.asarray(warm, dtype=bool)))
    synthetic = [np.asarray(b.synthetic, dtype=bool) for b in bars]
    return panel_from_arrays([b.symbol for b in bars], rows, horizon, synthetic, FEATURE_NAMES)


def panel_from_arrays(
    symbols: list[str],
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    horizon: int,
    synthetic: list[np.ndarray] | None = None,
    feature_names: tuple[str, ...] = (),
) -> Panel:
    """A panel from per-symbol (ts, close, features, warm) arrays and gap-fill flags (none if
    not given; also used by tests)."""
    lengths = [len(r[0]) for r in rows]
    flags = synthetic or [np.zeros(n, dtype=bool) for n in lengths]
    return Panel(
        symbols=list(symbols),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        ts=np.concatenate([r[0] for r in rows]).astype(np.int64),
        close=np.concatenate([r[1] for r in rows]).astype(np.float64),
        features=np.concatenate([r[2] for r in rows]).astype(np.float64),
        warm=np.concatenate([r[3] for r in rows]),
        targets=np.concatenate([forward_returns(r[0], r[1], horizon) for r in rows]),
        synthetic=np.concatenate(flags).astype(bool),
        feature_names=tuple(feature_names),
    )


def forward_returns(ts: np.ndarray, close: np.ndarray, horizon: int) -> np.ndarray:
    """`(n, horizon)`: log(close[t+k] / close[t]), NaN where bar t+k is not k minutes after t
    (past the end, or across a session break the corrections did not fill)."""
    n = len(ts)
    out = np.full((n, horizon), np.nan)
    log_close = np.log(close)
    for k in range(1, horizon + 1):
        contiguous = ts[k:] - ts[:-k] == k * NS_PER_MIN if n > k else np.zeros(0, dtype=bool)
        out[: n - k, k - 1] = np.where(contiguous, log_close[k:] - log_close[: n - k], np.nan)
    return out


def window_ends(panel: Panel, split: Split, part: Part, lookback: int, horizon: int) -> np.ndarray:
    """Global rows t of every valid window of `part` (see the module docstring)."""
    if split.embargo < lookback + horizon:
        raise DataError(
            f"embargo {split.embargo} bars is shorter than lookback + horizon = "
            f"{lookback + horizon}; windows could straddle a split boundary"
        )
    parts = split.part_of(panel.ts)
    cold = np.concatenate([[0], np.cumsum(~panel.warm)])
    ends = []
    for i in range(len(panel.symbols)):
        lo, hi = int(panel.offsets[i]), int(panel.offsets[i + 1])
        t = np.arange(lo + lookback - 1, hi - horizon)
        first = t - lookback + 1
        ok = (cold[t + 1] - cold[first] == 0) & np.isfinite(panel.targets[t]).all(axis=1)
        ok &= ~panel.synthetic[t]
        ok &= (parts[first] == part) & (parts[t + horizon] == part)
        if part != Part.TRAIN:
            in_part = np.flatnonzero(parts[lo:hi] == part)
            start = lo + int(in_part[0]) if len(in_part) else hi
            ok &= first >= start + split.embargo
        ends.append(t[ok])
    return np.concatenate(ends).astype(np.int64) if ends else np.zeros(0, dtype=np.int64)


def labels_over_gap_fills(panel: Panel, ends: np.ndarray, horizon: int) -> np.ndarray:
    """(n,) True where a window's label runs over a gap fill: no trade moved the price there,
    which the zero volume of the inputs all but gives away, so these are scored apart."""
    filled = np.concatenate([[0], np.cumsum(panel.synthetic)])
    return filled[ends + horizon + 1] - filled[ends + 1] > 0


def calibration_windows(panel: Panel, ends: np.ndarray, horizon: int) -> np.ndarray:
    """The calibration split's windows `ends` that calibrate interval scales: those whose label
    crosses no gap fill. Scoring sets those apart, so they would only narrow every interval."""
    return ends[~labels_over_gap_fills(panel, ends, horizon)]


@dataclass
class Batch:
    """Windows as their distinct feature rows: overlapping windows share most rows, and the
    model encodes each row once (`TemporalFusionTransformer.forward_shared`)."""

    symbol: torch.Tensor  # (B,) int64 embedding rows
    static_reals: torch.Tensor  # (B, n_static - 1)
    rows: torch.Tensor  # (U, n_hist) distinct normalized feature rows
    index: torch.Tensor  # (B, lookback) each window's rows, oldest first
    row_window: torch.Tensor  # (U,) a window holding each row
    x_future: torch.Tensor  # (B, horizon, n_future)
    y: torch.Tensor  # (B, horizon) log returns / target_scale
    unit: torch.Tensor  # (B, horizon) the volatility scale / target_scale: model output x unit = y

    @property
    def x_hist(self) -> torch.Tensor:
        """The windows materialized, `(B, lookback, n_hist)`."""
        return self.rows[self.index]

    def symbols_dropped(self, p: float) -> torch.Tensor:
        """The windows' symbols, with probability `p` all 0 (unknown, as for a symbol unseen in
        training): the whole batch or none, since each shared row is encoded once with one
        window's symbol context, and a symbol dropped per window would leak into its neighbours'
        rows (and theirs into its own)."""
        return torch.zeros_like(self.symbol) if torch.rand(()) < p else self.symbol


class WindowData:
    """Model-ready tensors of a panel; `batch(ends)` gathers windows without copying the panel
    per window (a month of feature-row windows would not fit in memory materialized)."""

    def __init__(
        self,
        panel: Panel,
        normalizer: Normalizer,
        vocab: SymbolVocab,
        lookback: int,
        horizon: int,
        target_scale: float,
        volatility: VolatilityScale,
        calendar: ReleaseCalendar | None = None,
    ) -> None:
        self.panel = panel
        self.lookback, self.horizon, self.target_scale = lookback, horizon, target_scale
        self.features = torch.from_numpy(normalizer.apply(panel.features))
        self.future = torch.from_numpy(known_future(panel.ts, horizon, calendar))
        self.targets = torch.from_numpy((panel.targets / target_scale).astype(np.float32))
        inputs = window_rows(panel.features[:, list(volatility.columns)], lookback)
        unit = volatility.scale(panel.ts, inputs, horizon) / target_scale
        self.unit = torch.from_numpy(unit.astype(np.float32))
        ids, reals = vocab.encode(panel.symbols)
        row_symbol = torch.from_numpy(panel.row_symbol)
        self.symbol = torch.from_numpy(ids)[row_symbol]
        self.static_reals = torch.from_numpy(reals)[row_symbol]
        self._steps = np.arange(-lookback + 1, 1)

    def batch(self, ends: np.ndarray) -> Batch:
        ends = np.asarray(ends, dtype=np.int64)
        rows, inverse = np.unique(ends[:, None] + self._steps, return_inverse=True)
        row_window = np.empty(len(rows), dtype=np.int64)
        row_window[inverse.ravel()] = np.repeat(np.arange(len(ends)), self.lookback)
        t = torch.from_numpy(ends)
        return Batch(
            symbol=self.symbol[t],
            static_reals=self.static_reals[t],
            rows=self.features[torch.from_numpy(rows)],
            index=torch.from_numpy(inverse.reshape(len(ends), self.lookback)),
            row_window=torch.from_numpy(row_window),
            x_future=self.future[t],
            y=self.targets[t],
            unit=self.unit[t],
        )


def window_rows(values: np.ndarray, lookback: int) -> np.ndarray:
    """`(R, lookback, k)`: each row's window of `values` `(R, k)`, oldest first (a view; the
    first rows repeat row 0, and no window of them is ever used)."""
    padded = np.concatenate([np.repeat(values[:1], lookback - 1, axis=0), values])
    return np.lib.stride_tricks.sliding_window_view(padded, lookback, axis=0).transpose(0, 2, 1)


def one_bar_returns(panel: Panel) -> np.ndarray:
    """(R,) each row's 1-bar log return; NaN at a symbol's first bar and after a gap."""
    return np.concatenate(
        [
            contiguous_returns(panel.ts[lo:hi], panel.close[lo:hi])
            for lo, hi in zip(panel.offsets[:-1], panel.offsets[1:], strict=True)
        ]
    )


def fit_profile(panel: Panel, train_end: int) -> TimeOfDayProfile:
    """The time-of-day profile of the training bars (ts < train_end), each symbol's returns in
    units of its own RMS so that one product's level does not outweigh another's."""
    r = one_bar_returns(panel)
    train = panel.ts < train_end
    for lo, hi in zip(panel.offsets[:-1], panel.offsets[1:], strict=True):
        rms = np.sqrt(np.nanmean(r[lo:hi][train[lo:hi]] ** 2)) if train[lo:hi].any() else 0.0
        r[lo:hi] = r[lo:hi] / rms if rms > 0 else np.nan
    return TimeOfDayProfile.fit(panel.ts[train], r[train])


def fit_normalizer(panel: Panel, train_ends: np.ndarray, lookback: int) -> Normalizer:
    """Normalization statistics from the input rows of training windows only, the return-unit
    features stated relative to the row's slow volatility (`Relative.of`); calendar features
    whose cycle those rows do not span are left out (`Normalizer.ignored`): a month of training
    has seen a day-of-month only up to its last training day."""
    from features.timefeat import CYCLE_DAYS

    rows = np.unique((train_ends[:, None] + np.arange(-lookback + 1, 1)).ravel())
    span_days = (panel.ts[rows].max() - panel.ts[rows].min()) / NS_PER_DAY
    uncovered = np.array([CYCLE_DAYS.get(n, 0) > span_days for n in panel.feature_names])
    return Normalizer.fit(
        panel.features[rows],
        ignore=uncovered if len(uncovered) else None,
        relative=Relative.of(panel.feature_names),
    )


def ignored_names(panel: Panel, ignored: np.ndarray) -> list[str]:
    """The names of the `ignored` `(F,)` columns of `panel.features`."""
    names = panel.feature_names or tuple(f"#{i}" for i in range(panel.features.shape[1]))
    return [names[i] for i in np.flatnonzero(ignored)]


def target_quantiles(panel: Panel, ends: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """`(horizon, n_quantiles)` quantiles of the labels of `ends` (the persistence baseline)."""
    return np.quantile(panel.targets[ends], quantiles, axis=0).T
