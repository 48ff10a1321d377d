"""The worker's memory in the pipeline benchmark: its peak RSS, and what the peak is made of.

Measured from outside the worker process: its resident set when ready (interpreter, libraries,
the model loaded) and its peak (`VmHWM`) after the 1,000-symbol bursts. The peak's growth over
the ready worker is set against what the worker must hold per symbol, sized from the model's
configuration and the feature engine's state layout; what is left (`other_mb`) is the batches in
flight, the broker client's buffers, the allocators' free lists and Python objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from features.engine import STATE_SIZE
from model.config import TFTConfig
from model.tft import TemporalFusionTransformer

MB = 2**20


def status_mb(pid: int | None, field: str) -> float | None:
    """A `/proc/PID/status` memory field in MB (`VmRSS`: now, `VmHWM`: the peak so far)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def held_per_symbol(config: TFTConfig) -> dict[str, int]:
    """Bytes the worker keeps for each symbol it forecasts."""
    return {
        "feature_state": 8 * STATE_SIZE,  # float64 state of every feature
        "window_rows": 8 * config.lookback * config.n_hist,  # the last lookback rows, float64
        "step_encodings": 4 * config.lookback * config.hidden,  # the engine's cache, float32
        "static_context": 4 * 4 * config.hidden,  # four (hidden,) float32 per symbol
    }


def breakdown(
    config: TFTConfig, symbols: int, ready_mb: float | None, peak_mb: float | None
) -> dict[str, Any]:
    """The peak RSS beside the ready worker's and the per-symbol state of `symbols` symbols."""
    params = TemporalFusionTransformer(config).n_params()
    held = {name: round(b * symbols / MB, 1) for name, b in held_per_symbol(config).items()}
    grown = None if ready_mb is None or peak_mb is None else round(peak_mb - ready_mb, 1)
    return {
        "peak_rss_mb": peak_mb,
        "ready_rss_mb": ready_mb,
        "model_weights_mb": round(4 * params / MB, 1),  # float32, loaded before ready
        "symbols": symbols,
        "per_symbol_mb": held,
        "grown_mb": grown,
        "other_mb": None if grown is None else round(grown - sum(held.values()), 1),
    }
