"""Robust per-feature scaling, fitted on the training split only and saved in the checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

IQR_TO_STD = 1.349  # IQR of a standard normal


@dataclass(frozen=True)
class Normalizer:
    """z = clip((x - median) / scale, +-clip); NaN -> 0 (the median).

    scale = IQR / 1.349, or the standard deviation where the IQR is 0 (a mostly-constant flag),
    or 1 where the feature never varied in training (it then maps to a constant 0).
    """

    center: np.ndarray
    scale: np.ndarray
    clip: float = 8.0

    @classmethod
    def fit(cls, values: np.ndarray, clip: float = 8.0) -> Normalizer:
        """values `(n, F)` of the training rows."""
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
        scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
        center = np.where(np.isfinite(center), center, 0.0)
        return cls(center.astype(np.float64), scale.astype(np.float64), float(clip))

    @property
    def constant(self) -> np.ndarray:
        """Features that did not vary in the training rows (they carry no information)."""
        return self.scale == 1.0

    def apply(self, values: np.ndarray) -> np.ndarray:
        """`(..., F)` float64 -> float32, same shape."""
        z = (np.asarray(values, dtype=np.float64) - self.center) / self.scale
        return np.nan_to_num(np.clip(z, -self.clip, self.clip), nan=0.0).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"center": self.center.tolist(), "scale": self.scale.tolist(), "clip": self.clip}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Normalizer:
        center = np.asarray(values["center"], dtype=np.float64)
        scale = np.asarray(values["scale"], dtype=np.float64)
        if center.shape != scale.shape or center.ndim != 1 or not np.all(scale > 0):
            raise ValueError(
                "normalization stats are corrupt: center/scale must be equal-length "
                "vectors with positive scales; retrain the checkpoint"
            )
        return cls(center, scale, float(values["clip"]))
