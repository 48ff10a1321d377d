"""Time splits of a panel: train < validation < calibration < test, by fractions of the bars
or by dates, and the order their boundaries must keep."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from model.bar_files import DataError, iso_utc


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
        check_fractions(val, calib, test)
        cuts = np.quantile(np.sort(ts), [1 - val - calib - test, 1 - calib - test, 1 - test])
        train_end, val_end, calib_end = (int(c) for c in cuts)
        return cls(train_end, val_end, calib_end if test > 0 else int(ts.max()) + 1, embargo)

    @classmethod
    def from_dates(
        cls, ts: np.ndarray, val: int, calib: int, test: int | None, embargo: int
    ) -> Split:
        """Boundaries at the UTC ns where validation, calibration and (if given) test start;
        without a test start, calibration runs to the last bar."""
        named = {"--val-start": val, "--calib-start": calib}
        check_order(named | ({"--test-start": test} if test is not None else {}))
        first, last = int(ts.min()), int(ts.max())
        if val <= first:
            raise DataError(
                f"--val-start {iso_utc(val)} is not after the first bar ({iso_utc(first)}): "
                "no bar is left to train on; move it later or read from an earlier --start"
            )
        if calib > last:
            raise DataError(
                f"--calib-start {iso_utc(calib)} is after the last bar ({iso_utc(last)}): "
                "no bar is left to calibrate on; move it earlier or read to a later --end"
            )
        return cls(val, calib, last + 1 if test is None else test, embargo)

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


def check_order(dates: dict[str, int]) -> None:
    """Named boundaries (UTC ns) must increase in the order given."""
    for (a, x), (b, y) in itertools.pairwise(dates.items()):
        if not x < y:
            raise DataError(f"{a} {iso_utc(x)} is not before {b} {iso_utc(y)}; order them")


def check_fractions(val: float, calib: float, test: float) -> None:
    if not (val > 0 and calib > 0 and test >= 0 and val + calib + test < 1):
        raise DataError(
            f"--val-fraction {val} / --calib-fraction {calib} / --test-fraction {test}: "
            "need val > 0, calib > 0, test >= 0 and val + calib + test < 1"
        )
