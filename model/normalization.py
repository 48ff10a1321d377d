"""Robust per-feature scaling, fitted on the training split only and saved in the checkpoint.

Features in return units (`features.units`) are first stated relative to the row's own slowest
volatility: a training set of ES months feeds the network the same inputs in a calm and in a
wild year, and on 6E, whose moves are several times smaller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

IQR_TO_STD = 1.349  # IQR of a standard normal
LOG_FLOOR = 1e-3  # a volatility level at or below this share of the reference (a flat market)


@dataclass(frozen=True)
class Normalizer:
    """z = clip((x - median) / scale, +-clip); NaN -> 0 (the median); 0 for `ignored` features.

    scale = IQR / 1.349, or the standard deviation where the IQR is 0 (a mostly-constant flag),
    or 1 where the feature never varied in training. A feature that never varied, or one the
    caller marks (a calendar feature whose cycle training did not cover), is `ignored`: the
    network's weights for it never saw a value other than its training one, so serving feeds it
    the same 0 whatever it holds then.

    Before that, with a `reference` column: `log_ratio` columns become log(x / reference) (at
    least log `LOG_FLOOR`) and `ratio` columns x / reference, both of the same row.
    """

    center: np.ndarray
    scale: np.ndarray
    clip: float = 8.0
    ignored: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    reference: int = -1  # column the relative features are stated against; -1: none
    log_ratio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ratio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if len(self.ignored) == 0:
            object.__setattr__(self, "ignored", np.zeros(len(self.center), dtype=bool))

    @classmethod
    def fit(
        cls,
        values: np.ndarray,
        clip: float = 8.0,
        ignore: np.ndarray | None = None,
        relative: Relative | None = None,
    ) -> Normalizer:
        """values `(n, F)` of the training rows; `ignore` `(F,)` marks features to leave out;
        `relative` the columns stated against a reference column (none if not given)."""
        if values.ndim != 2 or len(values) == 0:
            raise ValueError(
                f"Normalizer.fit needs a non-empty (rows, features) array, got shape "
                f"{values.shape}; the training split holds no warm rows — give more data"
            )
        rel = relative or Relative()
        values = rel.apply(np.asarray(values, dtype=np.float64))
        center = np.nanmedian(values, axis=0)
        q75, q25 = np.nanpercentile(values, [75, 25], axis=0)
        scale = (q75 - q25) / IQR_TO_STD
        std = np.nanstd(values, axis=0)
        scale = np.where(scale > 0, scale, std)
        varied = np.isfinite(scale) & (scale > 0)
        scale = np.where(varied, scale, 1.0)
        center = np.where(np.isfinite(center), center, 0.0)
        ignored = ~varied if ignore is None else ~varied | ignore
        return cls(
            center.astype(np.float64),
            scale.astype(np.float64),
            float(clip),
            ignored,
            rel.reference,
            rel.log_ratio,
            rel.ratio,
        )

    @property
    def relative(self) -> Relative:
        return Relative(self.reference, self.log_ratio, self.ratio)

    def apply(self, values: np.ndarray) -> np.ndarray:
        """`(..., F)` float64 -> float32, same shape."""
        z = (self.relative.apply(np.asarray(values, dtype=np.float64)) - self.center) / self.scale
        z = np.where(self.ignored, 0.0, np.clip(z, -self.clip, self.clip))
        return np.nan_to_num(z, nan=0.0).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {
            "center": self.center.tolist(),
            "scale": self.scale.tolist(),
            "clip": self.clip,
            "ignored": np.flatnonzero(self.ignored).tolist(),
            "reference": self.reference,
            "log_ratio": self.log_ratio.tolist(),
            "ratio": self.ratio.tolist(),
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Normalizer:
        center = np.asarray(values["center"], dtype=np.float64)
        scale = np.asarray(values["scale"], dtype=np.float64)
        left_out = np.asarray(values.get("ignored", [-1]), dtype=np.int64)
        if (
            center.shape != scale.shape
            or center.ndim != 1
            or not np.all(scale > 0)
            or not np.all((left_out >= 0) & (left_out < len(center)))
        ):
            raise ValueError(
                "normalization stats are corrupt or older than barcast's: center/scale must be "
                "equal-length vectors with positive scales, `ignored` their feature indices; "
                "retrain the checkpoint"
            )
        ignored = np.zeros(len(center), dtype=bool)
        ignored[left_out] = True
        rel = Relative.from_dict(values, len(center))
        return cls(
            center, scale, float(values["clip"]), ignored, rel.reference, rel.log_ratio, rel.ratio
        )


@dataclass(frozen=True)
class Relative:
    """Columns restated against a reference column of the same row (see `Normalizer`)."""

    reference: int = -1
    log_ratio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ratio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, names: tuple[str, ...]) -> Relative:
        """The return-unit features of `features.units` among `names`, against its reference
        (none where `names` lacks the reference)."""
        from features import units

        if units.REFERENCE not in names:
            return cls()
        index = {n: i for i, n in enumerate(names)}
        return cls(
            index[units.REFERENCE],
            np.array([index[n] for n in units.VOLATILITY_LEVELS if n in index], dtype=np.int64),
            np.array([index[n] for n in units.RETURN_SIZED if n in index], dtype=np.int64),
        )

    def apply(self, values: np.ndarray) -> np.ndarray:
        """`(..., F)` with the relative columns restated (a copy; `values` if there are none).
        A reference that is not positive (NaN before warm-up) leaves them NaN, fed as 0."""
        if self.reference < 0:
            return values
        out = values.copy()
        ref = values[..., self.reference : self.reference + 1]
        ref = np.where(ref > 0, ref, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[..., self.ratio] = values[..., self.ratio] / ref
            levels = values[..., self.log_ratio] / ref
            out[..., self.log_ratio] = np.log(np.maximum(levels, LOG_FLOOR))
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any], n_features: int) -> Relative:
        """As saved by `Normalizer.to_dict`; none for checkpoints saved before it existed."""
        reference = int(values.get("reference", -1))
        log_ratio = np.asarray(values.get("log_ratio", []), dtype=np.int64)
        ratio = np.asarray(values.get("ratio", []), dtype=np.int64)
        columns = np.concatenate([log_ratio, ratio])
        outside = (columns < 0) | (columns >= n_features)
        if reference >= n_features or (reference >= 0 and outside.any()):
            raise ValueError(
                "normalization stats are corrupt: the relative columns must be feature indices; "
                "retrain the checkpoint"
            )
        return cls(reference, log_ratio, ratio)
