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
from functools import cached_property

import numpy as np
import torch

from model.bar_files import CleanBars, DataError
from model.covariates import NS_PER_DAY, NS_PER_MIN, SymbolVocab
from model.normalization import Normalizer, Relative
from model.releases import ReleaseCalendar, known_future
from model.splits import Part, Split
from model.volatility import TimeOfDayProfile, VolatilityScale, contiguous_returns

TRAINING_DTYPE = np.float32  # the panel's features in training: half float64's memory; a
# feature's relative rounding (6e-8) is far below what its normalized value resolves
FEATURE_CHUNK = 4096  # bars per feature-engine call (its float64 output is this x 225)


@dataclass
class Panel:
    """Every symbol's rows, concatenated; `offsets[i]:offsets[i+1]` are symbol i's rows."""

    symbols: list[str]
    offsets: np.ndarray  # (n_symbols + 1,)
    ts: np.ndarray  # (R,) int64 ns, bar open
    close: np.ndarray  # (R,) float64
    features: np.ndarray  # (R, F) raw feature-engine output: float32 to train, float64 to serve
    warm: np.ndarray  # (R,) bool
    targets: np.ndarray  # (R, horizon) float64 log returns; NaN where the label is unavailable
    synthetic: np.ndarray  # (R,) bool: a gap fill of the corrections (O=H=L=C, volume 0)
    feature_names: tuple[str, ...] = ()  # the columns of `features`

    @property
    def row_symbol(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.symbols)), np.diff(self.offsets))


def build_panel(
    bars: list[CleanBars], horizon: int, dtype: type = np.float64, chunk: int = FEATURE_CHUNK
) -> Panel:
    """Run the feature engine over each symbol's clean bars, `chunk` bars at a time with its
    state carried (the result equals one pass), into one `(R, 225)` array of `dtype`: training
    keeps float32 (`TRAINING_DTYPE`), evaluation float64, the worker's own values."""
    from features.engine import FEATURE_NAMES, N_FEATURES, new_states, update_many

    lengths = [len(b) for b in bars]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    features = np.empty((int(offsets[-1]), N_FEATURES), dtype=dtype)
    warm = np.empty(int(offsets[-1]), dtype=bool)
    for b, base in zip(bars, offsets[:-1], strict=True):
        states = new_states(1)
        for lo in range(0, len(b), chunk):
            hi = min(lo + chunk, len(b))
            columns = (b.ts_event, b.open, b.high, b.low, b.close, b.volume, b.synthetic)
            values, ok = update_many(
                states, np.zeros(hi - lo, dtype=np.int64), *(c[lo:hi] for c in columns)
            )
            if values.shape != (hi - lo, N_FEATURES):
                raise DataError(
                    f"feature engine returned {values.shape} for {hi - lo} bars of {b.symbol}; "
                    f"expected ({hi - lo}, {N_FEATURES})"
                )
            features[base + lo : base + hi] = values
            warm[base + lo : base + hi] = ok
    return Panel(
        symbols=[b.symbol for b in bars],
        offsets=offsets,
        ts=np.concatenate([b.ts_event for b in bars]).astype(np.int64),
        close=np.concatenate([b.close for b in bars]).astype(np.float64),
        features=features,
        warm=warm,
        targets=np.concatenate([forward_returns(b.ts_event, b.close, horizon) for b in bars]),
        synthetic=np.concatenate([b.synthetic for b in bars]).astype(bool),
        feature_names=tuple(FEATURE_NAMES),
    )


def panel_from_arrays(
    symbols: list[str],
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    horizon: int,
    synthetic: list[np.ndarray] | None = None,
    feature_names: tuple[str, ...] = (),
    dtype: type = np.float64,
) -> Panel:
    """A panel from per-symbol (ts, close, features, warm) arrays and gap-fill flags (none if
    not given; tests and synthetic panels)."""
    lengths = [len(r[0]) for r in rows]
    flags = synthetic or [np.zeros(n, dtype=bool) for n in lengths]
    return Panel(
        symbols=list(symbols),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        ts=np.concatenate([r[0] for r in rows]).astype(np.int64),
        close=np.concatenate([r[1] for r in rows]).astype(np.float64),
        features=np.concatenate([r[2] for r in rows]).astype(dtype),
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
        return drop_symbols(self.symbol, p)


def drop_symbols(symbol: torch.Tensor, p: float) -> torch.Tensor:
    """`symbol`, or with probability `p` all 0 (the unknown symbol's row)."""
    return torch.zeros_like(symbol) if torch.rand(()) < p else symbol


class WindowData:
    """Model-ready batches of a panel: `batch(ends)` gathers and normalizes the windows' rows
    and computes their calendar inputs then, so the only per-row array besides the panel is
    the volatility unit (a normalized or materialized copy of years of feature rows would not
    fit in memory)."""

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
        self.panel, self.normalizer, self.calendar = panel, normalizer, calendar
        self.lookback, self.horizon, self.target_scale = lookback, horizon, target_scale
        unit = scale_units(panel, volatility, lookback, horizon) / target_scale
        self.unit = torch.from_numpy(unit.astype(np.float32))
        ids, reals = vocab.encode(panel.symbols)
        self.symbol_ids, self.symbol_reals = torch.from_numpy(ids), torch.from_numpy(reals)
        self._steps = np.arange(-lookback + 1, 1)

    @cached_property
    def run_start(self) -> np.ndarray:
        """(R,) int64: the first row of each row's run of warm rows of its symbol, where a
        stream of its bars starts (model.stream); past the row itself for a cold row."""
        panel, n = self.panel, len(self.panel.ts)
        begins = np.zeros(n, dtype=np.int64)
        starts = panel.offsets[:-1][panel.offsets[:-1] < n]  # a symbol without rows: none
        begins[starts] = starts
        cold = np.flatnonzero(~panel.warm)
        begins[cold] = cold + 1
        return np.maximum.accumulate(begins)

    def batch(self, ends: np.ndarray) -> Batch:
        ends = np.asarray(ends, dtype=np.int64)
        rows, inverse = np.unique(ends[:, None] + self._steps, return_inverse=True)
        row_window = np.empty(len(rows), dtype=np.int64)
        row_window[inverse.ravel()] = np.repeat(np.arange(len(ends)), self.lookback)
        panel = self.panel
        symbol = torch.from_numpy(np.searchsorted(panel.offsets, ends, side="right") - 1)
        y = (panel.targets[ends] / self.target_scale).astype(np.float32)
        return Batch(
            symbol=self.symbol_ids[symbol],
            static_reals=self.symbol_reals[symbol],
            rows=torch.from_numpy(self.normalizer.apply(panel.features[rows])),
            index=torch.from_numpy(inverse.reshape(len(ends), self.lookback)),
            row_window=torch.from_numpy(row_window),
            x_future=torch.from_numpy(known_future(panel.ts[ends], self.horizon, self.calendar)),
            y=torch.from_numpy(y),
            unit=self.unit[torch.from_numpy(ends)],
        )


def scale_units(
    panel: Panel, volatility: VolatilityScale, lookback: int, horizon: int, chunk: int = 4096
) -> np.ndarray:
    """`(R, horizon)` float64: the volatility scale of the window ending at each row, computed
    `chunk` rows at a time (a window's value depends on its own rows only)."""
    inputs = window_rows(panel.features[:, list(volatility.columns)], lookback)
    out = np.empty((len(panel.ts), horizon))
    for lo in range(0, len(out), chunk):
        hi = lo + chunk
        out[lo:hi] = volatility.scale(panel.ts[lo:hi], inputs[lo:hi], horizon)
    return out


def window_rows(values: np.ndarray, lookback: int) -> np.ndarray:
    """`(R, lookback, k)` float64: each row's window of `values` `(R, k)`, oldest first (a
    view of one float64 copy, the dtype the volatility scale computes in; the first rows
    repeat row 0, and no window of them is ever used)."""
    padded = np.concatenate([np.repeat(values[:1], lookback - 1, axis=0), values], dtype=np.float64)
    return np.lib.stride_tricks.sliding_window_view(padded, lookback, axis=0).transpose(0, 2, 1)


@dataclass(frozen=True)
class WindowsOf:
    """The windows ending at rows `ends` of `window_rows`' view, each slice copied only when
    read (`model.volatility.Windows`): all of them at once is 8 bytes a value of a window."""

    rows: np.ndarray  # window_rows(...): a view
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, index: slice) -> np.ndarray:
        return self.rows[self.ends[index]]


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


def fit_normalizer(
    panel: Panel, train_ends: np.ndarray, lookback: int, block: int = 16
) -> Normalizer:
    """Normalization statistics from the input rows of training windows only, the return-unit
    features stated relative to the row's slow volatility (`Relative.of`); calendar features
    whose cycle those rows do not span are left out (`Normalizer.ignored`): a month of training
    has seen a day-of-month only up to its last training day. Fitted `block` features at a
    time (the statistics are per feature; a copy of every training row would double the
    panel), each block beside the reference column its relative features are stated against."""
    from features.timefeat import CYCLE_DAYS

    rows = np.flatnonzero(input_rows(len(panel.ts), train_ends, lookback))
    n_features = panel.features.shape[1]
    if len(rows) == 0:
        return Normalizer.fit(np.zeros((0, n_features)))  # its error says why
    span_days = (panel.ts[rows].max() - panel.ts[rows].min()) / NS_PER_DAY
    uncovered = np.array([CYCLE_DAYS.get(n, 0) > span_days for n in panel.feature_names])
    uncovered = uncovered if len(uncovered) else np.zeros(n_features, dtype=bool)
    relative = Relative.of(panel.feature_names)
    parts = [
        _fit_block(panel, rows, np.arange(lo, min(lo + block, n_features)), uncovered, relative)
        for lo in range(0, n_features, block)
    ]
    return Normalizer(
        np.concatenate([p.center for p in parts]),
        np.concatenate([p.scale for p in parts]),
        parts[0].clip,
        np.concatenate([p.ignored for p in parts]),
        relative.reference,
        relative.log_ratio,
        relative.ratio,
    )


def _fit_block(
    panel: Panel, rows: np.ndarray, columns: np.ndarray, uncovered: np.ndarray, relative: Relative
) -> Normalizer:
    """`Normalizer.fit` of `columns` on `rows`, the reference column appended for their
    relative features (its own statistics dropped)."""
    local = Relative()
    if relative.reference >= 0:
        local = Relative(
            len(columns),
            np.flatnonzero(np.isin(columns, relative.log_ratio)),
            np.flatnonzero(np.isin(columns, relative.ratio)),
        )
        columns = np.append(columns, relative.reference)
    n = len(columns) - (relative.reference >= 0)
    fitted = Normalizer.fit(
        panel.features[np.ix_(rows, columns)], ignore=uncovered[columns], relative=local
    )
    return Normalizer(fitted.center[:n], fitted.scale[:n], fitted.clip, fitted.ignored[:n])


def input_rows(n_rows: int, ends: np.ndarray, lookback: int) -> np.ndarray:
    """`(n_rows,)` bool: the rows some window ending at `ends` reads."""
    starts = np.bincount(ends - lookback + 1, minlength=n_rows + 1)
    stops = np.bincount(ends + 1, minlength=n_rows + 1)
    return np.cumsum(starts - stops)[:n_rows] > 0


def ignored_names(panel: Panel, ignored: np.ndarray) -> list[str]:
    """The names of the `ignored` `(F,)` columns of `panel.features`."""
    names = panel.feature_names or tuple(f"#{i}" for i in range(panel.features.shape[1]))
    return [names[i] for i in np.flatnonzero(ignored)]


def target_quantiles(panel: Panel, ends: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """`(horizon, n_quantiles)` quantiles of the labels of `ends` (the persistence baseline)."""
    return np.quantile(panel.targets[ends], quantiles, axis=0).T
