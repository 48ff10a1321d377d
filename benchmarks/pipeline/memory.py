"""The worker's memory in the pipeline benchmark: its peak RSS, and what the peak is made of.

Measured from outside the worker process: its resident set when ready (interpreter, libraries,
the model loaded) and its peak (`VmHWM`) after the 1,000-symbol bursts. The peak's growth over
the ready worker is set against what the worker must hold per symbol, sized from the model's
configuration and the feature engine's state layout. What is left (`other_mb`) is measured, part
by part, in one process by benchmarks/memory_probe/run.py: the stores' encoded changelog entries
beside their decoded states, the other stores' states, the static contexts, an agent batch's
requests in flight and the allocator's free-but-kept memory.
"""

from __future__ import annotations

from typing import Any

from benchmarks.memory_probe.parts import MB, status_mb
from features.engine import STATE_SIZE
from model.config import TFTConfig
from model.serving.windows import spare
from model.tft import TemporalFusionTransformer

__all__ = ["breakdown", "held_per_symbol", "status_mb"]


def held_per_symbol(config: TFTConfig) -> dict[str, int]:
    """Bytes the worker keeps for each symbol it forecasts: the window encoder caches the
    window's step encodings, the stream encoder its stream (model.serving.streaming)."""
    held = {
        "feature_state": 8 * STATE_SIZE,  # float64 state of every feature
        # the last lookback rows and the buffer's spare ones, float64
        "window_rows": 8 * (config.lookback + spare(config.lookback)) * config.n_hist,
        "static_context": 4 * 4 * config.hidden,  # four (hidden,) float32 per symbol
    }
    if config.encoder == "stream":
        d_head = config.hidden // config.heads
        # float32 LSTM state and ring of keys and values, the newest row's float64 values
        ring = config.lookback * (config.hidden + d_head)
        return held | {"stream": 4 * (2 * config.lstm_layers * config.hidden + ring)
                       + 8 * config.n_hist}  # fmt: skip
    return held | {"step_encodings": 4 * config.lookback * config.hidden}  # float32


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
