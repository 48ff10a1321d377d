"""The configurations: the Temporal Fusion Transformer's (saved in every checkpoint) and its
training recipe's (`barcast train`'s defaults are TrainConfig's)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


class ConfigError(ValueError):
    """A model configuration that cannot build a working TFT."""


ENCODERS = ("window", "stream")


@dataclass(frozen=True)
class TFTConfig:
    lookback: int = 60  # past bars the encoder sees
    horizon: int = 10  # future bars forecast (cumulative log return of the close, 1..horizon)
    hidden: int = 32
    heads: int = 4
    dropout: float = 0.1
    lstm_layers: int = 2
    n_hist: int = 227  # feature-engine columns per past bar
    n_static: int = 10  # static variables per symbol: the learned symbol embedding + 9 reals
    quantiles: tuple[float, ...] = (0.1, 0.5, 0.9)
    n_symbols: int = 1  # rows of the symbol embedding; row 0 is "unknown symbol"
    var_dim: int = 4  # width of each variable's own embedding/GRN inside variable selection
    zero_median: bool = True  # forecast a median return of exactly 0, as a martingale's is
    releases: bool = False  # known-future inputs include the release calendar (model.releases)
    # "stream": the encoder LSTM's state carries from bar to bar (model.stream), each bar
    # encoded once; "window": it reruns over each forecast's lookback from the static state.
    # The default by the encoders' protocol (benchmarks/walk_forward/encoders.json)
    encoder: str = "stream"

    def __post_init__(self) -> None:
        # JSON round trips turn the tuple into a list; the config must stay hashable.
        object.__setattr__(self, "quantiles", tuple(float(q) for q in self.quantiles))
        self.validate()

    @property
    def n_static_reals(self) -> int:
        return self.n_static - 1

    @property
    def n_future(self) -> int:
        """Known-future variables per future bar: the calendar's, and the releases' if on."""
        # numpy-free at import: `barcast --help` loads this module, not the covariates
        from model.releases import future_names

        return len(future_names(self.releases))

    def validate(self) -> None:
        positive = (
            "lookback",
            "horizon",
            "hidden",
            "heads",
            "lstm_layers",
            "n_hist",
            "n_symbols",
            "var_dim",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"TFTConfig.{name}={getattr(self, name)} must be >= 1")
        if self.n_static < 2:
            raise ConfigError("TFTConfig.n_static must be >= 2 (the symbol embedding + reals)")
        if self.hidden % self.heads:
            raise ConfigError(
                f"TFTConfig.hidden={self.hidden} must be divisible by heads={self.heads}; "
                f"pick e.g. hidden={self.heads * max(1, self.hidden // self.heads)}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"TFTConfig.dropout={self.dropout} must be in [0, 1)")
        if self.encoder not in ENCODERS:
            raise ConfigError(f"TFTConfig.encoder={self.encoder!r} must be one of {ENCODERS}")
        qs = self.quantiles
        if list(qs) != sorted(set(qs)) or not all(0.0 < q < 1.0 for q in qs) or 0.5 not in qs:
            raise ConfigError(
                f"TFTConfig.quantiles={qs} must be strictly increasing in (0, 1) and contain 0.5 "
                "(the non-crossing head grows the other quantiles outward from the median)"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"n_future": self.n_future}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TFTConfig:
        """A saved config; one saved before `releases` existed loads with it off, one saved
        before encoders were a choice with the window encoder (the only one then)."""
        values = {"encoder": "window"} | dict(values)
        saved_width = values.pop("n_future", None)  # derived, saved for readers of the file
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"unknown TFTConfig fields {unknown}; this checkpoint is from a "
                "newer barcast, upgrade barcast to load it"
            )
        config = cls(**values)
        if saved_width is not None and saved_width != config.n_future:
            raise ConfigError(
                f"the checkpoint was trained with {saved_width} known-future inputs, this "
                f"barcast builds {config.n_future} for releases={config.releases}; serve it with "
                "the barcast it was trained with, or retrain"
            )
        return config


# An epoch's windows when windows_per_epoch is 0: consecutive windows share all but one bar and
# nine of their ten label minutes, so a tenth of them is about one pass over the independent
# labels; bounded so that a month still trains and years do not take days.
AUTO_EPOCH_WINDOWS = (20_000, 100_000)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 6
    batch_size: int = 256
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup: float = 0.05  # fraction of all steps spent warming the LR up linearly
    clip_norm: float = 1.0
    patience: int = 3  # epochs without a better validation loss before stopping
    seed: int = 0
    val_fraction: float = 0.1  # early stopping
    calib_fraction: float = 0.1  # interval calibration
    test_fraction: float = 0.25
    # Split dates (UTC, `2013-01-01` or an ISO date-time) instead of the fractions: where
    # validation, calibration and the held-out test start (none: calibration runs to the end)
    val_start: str | None = None
    calib_start: str | None = None
    test_start: str | None = None
    embargo: int = 0  # bars between splits; 0 means lookback + horizon
    windows_per_epoch: int = 0  # random training windows per epoch; 0: AUTO_EPOCH_WINDOWS
    chunk: int = 32  # batches are random runs of this many consecutive windows: they share
    # most feature rows, which the model then encodes once
    symbol_dropout: float = 0.1  # trains embedding row 0, used for symbols unseen in training
    device: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "patience", "chunk"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TrainConfig.{name}={getattr(self, name)} must be >= 1")
        if self.windows_per_epoch < 0 or self.embargo < 0:
            name = "windows_per_epoch" if self.windows_per_epoch < 0 else "embargo"
            raise ConfigError(f"TrainConfig.{name}={getattr(self, name)} must be >= 0 (0: auto)")

    def epoch_windows(self, n_train: int) -> int:
        """Training windows drawn per epoch out of `n_train`."""
        if self.windows_per_epoch:
            return min(n_train, self.windows_per_epoch)
        low, high = AUTO_EPOCH_WINDOWS
        return min(n_train, max(low, min(high, n_train // 10)))
