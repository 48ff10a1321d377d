"""FirstRate Data 1-minute bars stored one JSON file per day: a folder such as `dailydata/`
holding `2010-06-15.json`, each a list of
`{"dateTime": "2010-06-15 00:00:00", "open", "high", "low", "close", "volume"}`.

`dateTime` is the bar's open, wall-clock time in US/Eastern, and a file holds the bars of its
Eastern calendar day. The wall clock repeats an hour when daylight saving ends and skips one
when it starts, so the conversion to UTC reads each file in order: a bar of the repeated hour is
EDT until the clock steps back, EST after it; a bar stamped in the skipped hour cannot exist
and is refused, and so is a repeated-hour bar whose file never steps back (EDT or EST cannot
be told). The folder is read a few days at a time, only the days a UTC range needs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

EASTERN = "America/New_York"
DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.json$")
PRICES = ("open", "high", "low", "close")


def day_files(folder: Path) -> dict[dt.date, Path]:
    """The folder's day files by their Eastern date, in date order (other names ignored)."""
    days = {}
    for path in folder.iterdir():
        match = DAY_FILE.match(path.name)
        if match:
            days[dt.date.fromisoformat(match.group(1))] = path
    return dict(sorted(days.items()))


def eastern_date(ts_ns: int) -> dt.date:
    """The Eastern calendar day (the day file) holding the bar that opens at UTC `ts_ns`."""
    return pd.Timestamp(ts_ns, unit="ns", tz="UTC").tz_convert(EASTERN).date()


def eastern_midnight(day: dt.date) -> int:
    """UTC ns of 00:00 Eastern on `day`: where its day file starts."""
    return pd.Timestamp(day).tz_localize(EASTERN).as_unit("ns").value


def read_day(path: Path) -> tuple[pd.DataFrame, str]:
    """One day file as ts_event (int64 UTC ns, bar open), open..close and volume (float64),
    in the file's order, and the file's sha256. ValueError (naming the file and the fix) for a
    file that is not a day of FirstRate bars."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        rows = orjson.loads(raw)
        local = np.array([row["dateTime"] for row in rows], dtype="datetime64[ns]")
        values = {
            name: np.array([row[name] for row in rows], dtype=np.float64)
            for name in (*PRICES, "volume")
        }
    except (ValueError, TypeError, KeyError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise ValueError(
            f"{path}: not a FirstRate day file, a JSON list of {{dateTime: "
            f"'YYYY-MM-DD HH:MM:SS', open, high, low, close, volume}} ({exc!r})"
        ) from None
    day = np.datetime64(path.stem, "D")
    other = local.astype("datetime64[D]") != day
    if other.any():
        raise ValueError(
            f"{path}: holds a bar of {local[other][0]}, another day; a day file holds the "
            "bars of its own Eastern date: move the bar to its day's file"
        )
    ts = eastern_to_utc(pd.DatetimeIndex(local), path)
    return pd.DataFrame({"ts_event": ts, **values}), digest


def eastern_to_utc(local: pd.DatetimeIndex, where: Path | str) -> np.ndarray:
    """Wall-clock Eastern bar times, in their file's order, as int64 UTC ns (see the module
    docstring for the repeated and the skipped hour)."""
    utc = local.tz_localize(EASTERN, ambiguous="NaT", nonexistent="NaT")
    unresolved = utc.isna()
    if unresolved.any():
        utc = _resolve_daylight_saving(local, unresolved, where)
    return utc.as_unit("ns").asi8.copy()


def _resolve_daylight_saving(
    local: pd.DatetimeIndex, unresolved: np.ndarray, where: Path | str
) -> pd.DatetimeIndex:
    dst = np.ones(len(local), dtype=bool)
    skipped = unresolved & local.tz_localize(EASTERN, ambiguous=dst, nonexistent="NaT").isna()
    if skipped.any():
        raise ValueError(
            f"{where}: {local[skipped][0]} does not exist in US/Eastern (the clock skipped that "
            "hour as daylight saving started); correct or remove the bars stamped in it"
        )
    # Among the repeated hour's bars alone, in file order: the first pass is EDT, and EST begins
    # where the clock steps back, the largest step back (a vendor's repeated bar, in the hour or
    # elsewhere in the file, steps back less, or not within the hour).
    rows = np.flatnonzero(unresolved)
    steps = np.diff(local.as_unit("ns").asi8[rows])
    stepped_back = np.zeros(len(local), dtype=bool)
    if len(steps) and steps.min() <= 0:
        stepped_back[rows[int(np.argmin(steps)) + 1 :]] = True
    if not stepped_back.any():
        raise ValueError(
            f"{where}: {local[unresolved][0]} falls in the hour the clock repeats as daylight "
            "saving ends, and the file never steps back to repeat it, so EDT and EST cannot be "
            "told apart; correct or remove the bars of that hour"
        )
    return local.tz_localize(EASTERN, ambiguous=~stepped_back, nonexistent="raise")
