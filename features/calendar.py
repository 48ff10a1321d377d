"""Exchange calendar arithmetic in numba: UTC ns → US/Central wall clock → CME Globex session.

CME Globex trades Sunday–Friday from 17:00 to 16:00 US/Central the next day (one-hour daily
maintenance break); a session belongs to the trade date it closes on, so Sunday 17:00 opens
Monday's session. US/Central is UTC-6, or UTC-5 under US daylight saving time, which since 2007
runs from the second Sunday of March, 02:00 local (08:00 UTC) to the first Sunday of November,
02:00 local (07:00 UTC); 1987–2006 used the first Sunday of April to the last Sunday of October.
"""

from __future__ import annotations

import numpy as np

from features.primitives import kernel

NS_PER_MIN = 60_000_000_000
MIN_PER_DAY = 1440
SESSION_OPEN_MIN = 17 * 60  # 17:00 US/Central
SESSION_MINUTES = 23 * 60  # open until 16:00 the next day


@kernel
def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    mp = (m + 9) % 12  # March = 0
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@kernel
def civil_from_days(z: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number since 1970-01-01."""
    z += 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


@kernel
def weekday(days: int) -> int:
    """Monday = 0 … Sunday = 6 (1970-01-01 was a Thursday)."""
    return (days + 3) % 7


@kernel
def nth_sunday(y: int, m: int, n: int) -> int:
    """Day number of the n-th Sunday of a month (n = -1: the last one)."""
    if n > 0:
        first = days_from_civil(y, m, 1)
        return first + (6 - weekday(first)) % 7 + 7 * (n - 1)
    last = days_from_civil(y + (m == 12), m % 12 + 1, 1) - 1
    return last - (weekday(last) + 1) % 7


@kernel
def dst_bounds_min(y: int) -> tuple[int, int]:
    """[start, end) of US daylight saving time in year y, in UTC minutes since the epoch."""
    if y >= 2007:
        start, end = nth_sunday(y, 3, 2), nth_sunday(y, 11, 1)
    else:
        start, end = nth_sunday(y, 4, 1), nth_sunday(y, 10, -1)
    return start * MIN_PER_DAY + 8 * 60, end * MIN_PER_DAY + 7 * 60


@kernel
def session_of(local_min: int) -> tuple[int, int]:
    """(trade date as a day number, minutes since that session opened) for a Central minute.

    Minutes in the daily break (16:00–17:00) count past the session's 1380 minutes; callers clip.
    """
    day = local_min // MIN_PER_DAY
    minute = local_min - day * MIN_PER_DAY
    trade_date = day + 1 if minute >= SESSION_OPEN_MIN else day
    return trade_date, (minute - SESSION_OPEN_MIN) % MIN_PER_DAY


def cyclic_table(period: int) -> tuple[np.ndarray, np.ndarray]:
    """sin and cos of 2π·i/period for i in [0, period): computed once, frozen into the kernels."""
    angle = 2.0 * np.pi * np.arange(period) / period
    return np.sin(angle), np.cos(angle)
