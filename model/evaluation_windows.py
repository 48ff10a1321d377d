"""The windows `barcast evaluate` scores and those that calibrate every forecaster, per
`--split`: the checkpoint's test (or validation) windows and its calibration split, or with
`all` a file the model may never have seen, whose first bars calibrate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from model.bar_files import iso_utc
from model.dataset import Panel, Part, Split, calibration_windows, fit_profile, window_ends
from model.volatility import TimeOfDayProfile

if TYPE_CHECKING:
    from model.checkpoint import CheckpointMeta

NEW_DATA_CALIBRATION = 0.2  # share of a file's windows that calibrate the baselines (--split all)
PARTS = ("test", "val", "all")


@dataclass(frozen=True)
class EvaluationWindows:
    """The panel rows that end one evaluation's windows, and what the report says of them."""

    scored: np.ndarray
    calibration: np.ndarray  # every forecaster, the TFT too, is calibrated on these
    # Where the TFT's scale chose its blend (--split test): a baseline's blend may be chosen there.
    selection: np.ndarray | None
    profiles: dict[str, TimeOfDayProfile]  # the time-of-day profiles the baselines may take
    source: dict[str, Any]  # where the calibration windows come from


def choose_windows(
    panel: Panel, meta: CheckpointMeta, part: str, files: dict[str, str]
) -> EvaluationWindows:
    """The windows of `--split part` for the checkpoint `meta` on `panel`, read from `files`
    (path -> sha256)."""
    config = meta.config
    split = Split.from_dict(meta.data["split"]) if "split" in meta.data else None
    ends, fit_ends, source = evaluation_windows(panel, split, part, config.lookback, config.horizon)
    if part == "all":
        source |= trained_on_these(files, meta.data.get("files", {}))
    selection = (
        window_ends(panel, split, Part.VAL, config.lookback, config.horizon)
        if split is not None and part == "test"
        else None
    )
    profiles = {"checkpoint": meta.volatility.profile}
    if part == "all":  # a product or period the checkpoint's profile may not describe
        profiles["calibration bars"] = fit_profile(panel, int(panel.ts[fit_ends].max()) + 1)
    return EvaluationWindows(ends, fit_ends, selection, profiles, source)


def evaluation_windows(
    panel: Panel, split: Split | None, part: str, lookback: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(scored windows, the calibration windows, where the latter come from).

    `all` scores a file the model may never have seen: its first windows calibrate every
    forecaster, the TFT too (embargoed from the rest and scored by nobody).
    """
    if part not in PARTS:
        raise ValueError(f"--split {part!r}; use one of {PARTS}")
    if part == "all":
        start = int(panel.ts.min())
        cut = int(np.quantile(panel.ts, NEW_DATA_CALIBRATION))
        split = Split(start, start, cut, lookback + horizon)
        source = {"source": f"first {NEW_DATA_CALIBRATION:.0%} of this data's bars"}
    elif split is None:
        raise ValueError(f"the checkpoint records no data split; use --split all, not {part}")
    else:
        source = {"source": "the checkpoint's calibration split"}
    source["tft"] = (
        "recalibrated there like every forecaster (offline, the checkpoint's interval scale is "
        "replaced; as served, the worker's forecasts keep it)"
    )
    if part == "val":
        source["in_sample"] = (
            "the validation windows chose the TFT's best epoch and its scale, and the calibration "
            "split after them calibrates every forecaster: not an out-of-sample score"
        )
    scored_part = Part.VAL if part == "val" else Part.TEST
    ends = window_ends(panel, split, scored_part, lookback, horizon)
    fit_ends = calibration_windows(
        panel, window_ends(panel, split, Part.CALIB, lookback, horizon), horizon
    )
    bounds = {"val": split.train_end, "test": split.calib_end, "all": split.calib_end}
    if len(ends) == 0:
        raise ValueError(
            f"no complete {part} window in the data: that period starts at "
            f"{iso_utc(bounds[part])}; pass data covering it, or --split all for data the model "
            "was not trained on"
        )
    if len(fit_ends) == 0:
        raise ValueError(
            f"no calibration window in the data: the checkpoint's calibration period is "
            f"{iso_utc(split.val_end)} to {iso_utc(split.calib_end)}; pass data covering it too, "
            "or --split all"
        )
    return ends, fit_ends, source


def trained_on_these(files: dict[str, str], trained: dict[str, str]) -> dict[str, str]:
    """An `in_sample` warning where a file to score (path -> sha256) trained the checkpoint."""
    seen = sorted(path for path, digest in files.items() if digest in set(trained.values()))
    if not seen:
        return {}
    return {
        "in_sample": f"{', '.join(seen)} trained this checkpoint: --split all scores its "
        "training, validation and calibration windows too, not an out-of-sample score; "
        "--split test scores the windows it never saw"
    }
