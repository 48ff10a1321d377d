"""Time features [75-89] from ts_event: US/Central clock, CME Globex session, trade-date calendar.

Cyclic encodings are table lookups (tables computed once with numpy and frozen into the
kernel); trade-date fields are recomputed only when the trade date changes.
"""

from __future__ import annotations

import math

import numpy as np

from features import calendar, core
from features.primitives import Layout, kernel, rare
from features.spec import spec

GROUP = "time"
FIRST = 75
TOD_SIN, TOD_COS = calendar.cyclic_table(calendar.MIN_PER_DAY)
DOW_SIN, DOW_COS = calendar.cyclic_table(7)
MOY_SIN, MOY_COS = calendar.cyclic_table(12)
EUROPE_OPEN, US_OPEN, US_CLOSE = 2 * 60, 8 * 60 + 30, 16 * 60  # US/Central minutes of day
# Days a date feature takes to run through all its values: a model trained on fewer has not seen
# the values it will be served (model.dataset.fit_normalizer leaves such a feature out).
CYCLE_DAYS = {
    "dow_sin": 7,
    "dow_cos": 7,
    "us_dst": 366,
    "dom_frac": 31,
    "moy_sin": 366,
    "moy_cos": 366,
}

SPECS = (
    spec("tod_sin", 0, "sin(2π · US/Central minute of day / 1440)"),
    spec("tod_cos", 0, "cos(2π · US/Central minute of day / 1440)"),
    spec("dow_sin", 0, "sin(2π · weekday of the trade date / 7), Monday = 0"),
    spec("dow_cos", 0, "cos(2π · weekday of the trade date / 7)"),
    spec("session_elapsed", 0, "minutes since the 17:00 CT Globex open / 1380, clipped to 1"),
    spec("session_remaining", 0, "1 - session_elapsed"),
    spec("region_asia", 0, "1 if 17:00 <= CT time < 02:00"),
    spec("region_europe", 0, "1 if 02:00 <= CT time < 08:30"),
    spec("region_us", 0, "1 if 08:30 <= CT time < 16:00"),
    spec("us_dst", 0, "1 under US daylight saving time"),
    spec("bar_gap_log", 0, "ln(minutes since the previous bar), 0 for consecutive bars"),
    spec("session_new", 0, "1 on the first bar of a Globex session (trade date changed)"),
    spec("dom_frac", 0, "(day of month - 1) / (days in month - 1) of the trade date"),
    spec("moy_sin", 0, "sin(2π · (month - 1) / 12) of the trade date"),
    spec("moy_cos", 0, "cos(2π · (month - 1) / 12) of the trade date"),
)

LAYOUT = Layout("time")
DATE = LAYOUT.add("trade_date_plus_one")  # 0 = no date cached yet
DATE_FEATURES = LAYOUT.add("trade_date_features", 5)
SIZE = LAYOUT.size


@kernel
def update(gs: np.ndarray, ctx: np.ndarray, out: np.ndarray) -> None:
    o = FIRST
    tod = int(ctx[core.X_TOD])
    out[o] = TOD_SIN[tod]
    out[o + 1] = TOD_COS[tod]
    date = int(ctx[core.X_SESSION])
    if rare(gs[DATE] != date + 1):
        cache_trade_date(gs, date)
    out[o + 2] = gs[DATE_FEATURES]
    out[o + 3] = gs[DATE_FEATURES + 1]
    elapsed = min(ctx[core.X_SESSION_MIN], calendar.SESSION_MINUTES) / calendar.SESSION_MINUTES
    out[o + 4] = elapsed
    out[o + 5] = 1.0 - elapsed
    out[o + 6] = 1.0 if tod >= calendar.SESSION_OPEN_MIN or tod < EUROPE_OPEN else 0.0
    out[o + 7] = 1.0 if EUROPE_OPEN <= tod < US_OPEN else 0.0
    out[o + 8] = 1.0 if US_OPEN <= tod < US_CLOSE else 0.0
    out[o + 9] = ctx[core.X_DST]
    gap = ctx[core.X_GAP_MIN]
    out[o + 10] = math.log(gap) if gap > 1.0 else 0.0
    out[o + 11] = ctx[core.X_NEW_SESSION]
    out[o + 12] = gs[DATE_FEATURES + 2]
    out[o + 13] = gs[DATE_FEATURES + 3]
    out[o + 14] = gs[DATE_FEATURES + 4]


@kernel
def cache_trade_date(gs: np.ndarray, date: int) -> None:
    y, m, d = calendar.civil_from_days(date)
    wd = calendar.weekday(date)
    month_days = calendar.days_from_civil(y + (m == 12), m % 12 + 1, 1) - (date - d + 1)
    gs[DATE] = date + 1
    gs[DATE_FEATURES] = DOW_SIN[wd]
    gs[DATE_FEATURES + 1] = DOW_COS[wd]
    gs[DATE_FEATURES + 2] = (d - 1) / (month_days - 1)
    gs[DATE_FEATURES + 3] = MOY_SIN[m - 1]
    gs[DATE_FEATURES + 4] = MOY_COS[m - 1]
