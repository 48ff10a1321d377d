"""Whether a stream-encoder checkpoint's calibration describes the forecasts it serves.

Training validates and calibrates a streaming checkpoint (`TFTConfig(encoder="stream")`) on
windows whose stream started `BURN_IN` lookbacks before them (model.stream), while the worker
carries a symbol's stream for as long as its bars keep coming. `carry_check` forecasts
calibration windows (`RUNS` runs of `RUN`) both ways, the other over `LONG_CARRY` lookbacks,
and measures how far apart the two are: beyond `TOLERANCE` of the width between the outer
quantiles (the 80 % interval's, with q10 and q90), the interval scales fitted
here describe forecasts the worker does not serve, and `barcast train` says so.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from model.dataset import WindowData
from model.loop import pinball_loss, predict_windows
from model.stream import BURN_IN
from model.tft import TemporalFusionTransformer

log = logging.getLogger("barcast.train")

LONG_CARRY = 16  # lookbacks the longer stream carries: 16 hours of 1-minute bars
TOLERANCE = 0.01  # of the mean width of the 80 % interval
# Windows compared: runs of consecutive ones, evenly spaced, which share most of their bars (a
# batch encodes each distinct bar once: windows spread out would each bring their own)
RUNS, RUN = 8, 64


def carry_check(
    model: TemporalFusionTransformer,
    data: WindowData,
    ends: np.ndarray,
    batch_size: int,
    device: torch.device,
) -> dict[str, Any]:
    """The largest difference between forecasts of streams carried `BURN_IN` and `LONG_CARRY`
    lookbacks, over the mean width of the first's 80 % intervals, on `RUNS` runs of `RUN` of
    the windows `ends`; and the pinball loss of each (target units, before calibration)."""
    starts = np.linspace(0, max(len(ends) - RUN, 0), RUNS).astype(int)
    picked = np.unique(np.concatenate([ends[start : start + RUN] for start in starts]))
    short, y = predict_windows(model, data, picked, batch_size, device)
    # As many streamed positions a batch as the shorter carry's: its memory, not 8x more
    fewer = max(1, min(batch_size, len(picked)) * (BURN_IN + 1) // (LONG_CARRY + 1))
    long, _ = predict_windows(model, data, picked, fewer, device, burn_in=LONG_CARRY)
    width = float((short[..., -1] - short[..., 0]).mean())
    levels = torch.tensor(model.config.quantiles)
    check = {
        "burn_in": BURN_IN,
        "long_carry": LONG_CARRY,
        "windows": len(picked),
        "max_difference_of_width": float((long - short).abs().max()) / width,
        "pinball": pinball_loss(short, y, levels).item(),
        "pinball_long_carry": pinball_loss(long, y, levels).item(),
    }
    if not check["max_difference_of_width"] <= TOLERANCE:
        log.warning(
            "the stream encoder's forecasts depend on state older than %d lookbacks: carried "
            "%d lookbacks they move by up to %.3g of the interval's width (pinball %.5f against "
            "%.5f), and its interval scales were fitted on the shorter carry; the worker's "
            "online calibration (BARCAST_ONLINE_SCORING) recalibrates them live",
            BURN_IN, LONG_CARRY, check["max_difference_of_width"], check["pinball_long_carry"],
            check["pinball"],
        )  # fmt: skip
    return check
