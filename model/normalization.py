"""Robust per-feature scaling, fitted on the training split only and saved in the checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

IQR_TO_STD = 1.349  # IQR of a standard normal


@dataclass(frozen=True)
class Normalizer:
    """z = clip((x - median) / scale, +-clip); NaN -> 0 (the median); 0 for `ignored` features.

    scale = IQR / 1.349, or the standard deviation where the IQR is 0 (a mostly-constant flag),
    or 1 where the feature never varied in training. A feature that never varied, or one the
    caller marks (a calendar feature whose cycle training did not cover), is `ignored`: the
    network's weights for it never saw a value other than its training one, so serving feeds it
    the same 0 whatever it holds then.
    """

    center: np.ndarray
    scale: np.ndarray
    clip: float = 8.0
    ignored: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        if len(self.ignored) == 0:
            object.__setattr__(self, "ignored", np.zeros(len(self.center), dtype=bool))

    @classmethod
    def fit(
        cls, values: np.ndarray, clip: float = 8.0, ignore: np.ndarray | None = None
    ) -> Normalizer:
        """values `(n, F)` of the training rows; `ignore` `(F,)` marks features to leave out."""
        if values.ndim != 2 or len(values) == 0:
            raise ValueError(
                f"Normalizer.fit needs a non-empty (rows, features) array, got shape "
                f"{values.shape}; the training split holds no warm rows — give more data"
            )
        center = np.nanmedian(values, axis=0)
        q75, q25 = np.nanpercentile(values, [75, 25], axis=0)
        scale = (q75 - q25) / IQR_TO_STD
        std = np.nanstd(values, axis=0)
        scale = np.where(scale > 0, scale, std)
        varied = np.isfinite(scale) & (scale > 0)
        scale = np.where(varied, scale, 1.0)
        center = np.where(np.isfinite(center), center, 0.0)
        ignored = ~varied if ignore is None else ~varied | ignore
        return cls(center.astype(np.float64), scale.astype(np.float64), float(clip), ignored)

    def apply(self, values: np.ndarray) -> np.ndarray:
        """`(..., F)` float64 -> float32, same shape."""
        z = (np.asarray(values, dtype=np.float64) - self.center) / self.scale
        z = np.where(self.ignored, 0.0, np.clip(z, -self.clip, self.clip))
        return np.nan_to_num(z, nan=0.0).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {
            "center": self.center.tolist(),
            "scale": self.scale.tolist(),
            "clip": self.clip,
            "ignored": np.flatnonzero(self.ignored).tolist(),
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
        return cls(center, scale, float(values["clip"]), ignored)
