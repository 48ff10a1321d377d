"""Which features are in return units: proportional to the size of the price path's log moves.

Such a feature doubles when every log move of the path doubles, and so means little without the
volatility it was measured in: ES in 2008 and in 2017, or ES and 6E, move several-fold apart.
`model.normalization` states each relative to the same row's `REFERENCE`, the slowest volatility
the engine keeps: volatility levels as log-ratios, signed moves as ratios. A test holds every
feature listed here to that scaling and every other feature to not following it.
"""

from __future__ import annotations

REFERENCE = "ewma_vol_week"

# Positive volatility estimates: log(value / reference).
VOLATILITY_LEVELS = (
    "rv_5", "rv_10", "rv_20", "rv_60", "parkinson_20", "parkinson_60", "garman_klass_20",
    "garman_klass_60", "rogers_satchell_20", "rogers_satchell_60", "yang_zhang_20",
    "yang_zhang_60", "ewma_vol_fast", "ewma_vol_slow", "ewma_vol_day", "ewma_vol_week",
    "atr_rel", "bb_width_20", "donchian_width_20", "donchian_width_60", "gap_abs_mean_20",
    "cusum_threshold",
)  # fmt: skip

# Moves, spreads and other return-sized values, signed or often exactly 0: value / reference.
RETURN_SIZED = (
    "ret_1", "ret_oc", "range_hl", "upper_wick", "lower_wick", "gap_open", "typical_dev",
    "median_dev", "sma_5_dev", "sma_10_dev", "sma_20_dev", "sma_60_dev", "ema_5_dev",
    "ema_12_dev", "ema_26_dev", "ema_60_dev", "sma_5_20", "sma_20_60", "ema_12_26", "macd_rel",
    "macd_signal_rel", "macd_hist_rel", "roc_5", "roc_10", "roc_20", "roc_60", "ema_12_slope",
    "linreg_slope_20", "linreg_resid_20", "linreg_slope_60", "trix_15", "dema_20_dev",
    "dist_high_60", "dist_low_60", "qstick_14", "mid_dev_20", "mid_dev_60", "mid_20_60",
    "elder_bull_12", "elder_bear_12", "session_return", "prev_session_return", "ema_5_12",
    "vwap_dev_20", "vwap_dev_session", "force_13", "nvi_ret_20", "roll_spread_20",
    "roll_spread_60", "cs_spread_20", "cs_spread_60", "amihud_20", "amihud_60", "kyle_lambda_20",
    "kyle_lambda_60", "close_to_high_20", "close_to_low_20", "tr_log", "abdi_ranaldo_20",
    "abdi_ranaldo_60", "impact_now", "vwr_20", "kama_dev", "kama_slope",
)  # fmt: skip
