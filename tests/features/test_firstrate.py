"""FirstRate day files: Eastern bar opens to UTC, through both daylight-saving changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.firstrate import day_files, eastern_date, eastern_midnight, read_day
from tests.firstrate_days import minutes, write_day

MIN = 60_000_000_000


def utc(text: str) -> int:
    return int(pd.Timestamp(text, tz="UTC").as_unit("ns").value)


def test_bar_opens_convert_with_the_offset_of_their_date(tmp_path: Path) -> None:
    winter = write_day(tmp_path, "2012-01-10", ["09:30", "09:31"])
    summer = write_day(tmp_path, "2012-07-10", ["09:30"])
    frame, digest = read_day(winter)
    assert frame["ts_event"].tolist() == [utc("2012-01-10 14:30"), utc("2012-01-10 14:31")]
    assert read_day(summer)[0]["ts_event"].tolist() == [utc("2012-07-10 13:30")]
    assert len(digest) == 64 and frame["close"].dtype == np.float64
    assert list(day_files(tmp_path)) == [
        pd.Timestamp(d).date() for d in ("2012-01-10", "2012-07-10")
    ]
    assert eastern_date(utc("2012-01-11 04:59")) == pd.Timestamp("2012-01-10").date()
    assert eastern_midnight(pd.Timestamp("2012-01-11").date()) == utc("2012-01-11 05:00")


def test_the_repeated_fall_back_hour_is_edt_then_est(tmp_path: Path) -> None:
    """2010-11-07: 01:00-01:59 happens twice; in file order the first pass is EDT (UTC-4), the
    second EST (UTC-5): every bar is one minute after the one before it."""
    times = minutes("00:58", "01:59") + minutes("01:00", "02:01")
    frame, _ = read_day(write_day(tmp_path, "2010-11-07", times))
    ts = frame["ts_event"].to_numpy()
    assert np.all(np.diff(ts) == MIN), "the repeated hour must follow the first one"
    assert ts[0] == utc("2010-11-07 04:58") and ts[-1] == utc("2010-11-07 07:01")


@pytest.mark.parametrize("repeated", ["00:30", "01:10"])
def test_a_repeated_bar_does_not_shift_the_repeated_hour(tmp_path: Path, repeated: str) -> None:
    """A vendor's bar sent again (before the hour, or in its first pass) steps back too, but
    less than the clock does: the hour's first pass stays EDT, and the repeat is the
    corrections' to judge."""
    at = minutes("00:28", "01:59").index(repeated) + 1
    first = minutes("00:28", "01:59")
    times = [*first[:at], repeated, *first[at:]]
    frame, _ = read_day(write_day(tmp_path, "2010-11-07", times + minutes("01:00", "02:01")))
    ts = frame["ts_event"].to_numpy()
    assert ts[times.index("01:30")] == utc("2010-11-07 05:30")
    assert ts[len(times)] == utc("2010-11-07 06:00") and ts[-1] == utc("2010-11-07 07:01")
    assert len(set(ts.tolist())) == len(ts) - 1  # the repeat, nothing else


def test_the_skipped_spring_hour_joins_the_minutes_around_it(tmp_path: Path) -> None:
    """2011-03-13: 01:59 EST is followed by 03:00 EDT, one minute later."""
    frame, _ = read_day(write_day(tmp_path, "2011-03-13", ["01:58", "01:59", "03:00", "03:01"]))
    ts = frame["ts_event"].to_numpy()
    assert np.all(np.diff(ts) == MIN) and ts[0] == utc("2011-03-13 06:58")


def test_a_bar_in_the_skipped_hour_is_refused_with_its_file_and_time(tmp_path: Path) -> None:
    path = write_day(tmp_path, "2011-03-13", ["01:59", "02:30", "03:00"])
    with pytest.raises(ValueError, match=r"2011-03-13\.json: 2011-03-13 02:30:00 does not exist"):
        read_day(path)


def test_a_repeated_hour_bar_that_the_file_never_repeats_is_refused(tmp_path: Path) -> None:
    path = write_day(tmp_path, "2010-11-07", ["00:59", "01:30", "02:00"])
    with pytest.raises(ValueError, match="EDT and EST cannot be told apart"):
        read_day(path)


def test_files_that_are_not_day_files_are_refused_by_name(tmp_path: Path) -> None:
    other_day = write_day(tmp_path, "2012-01-10", ["09:30"])
    rows = json.loads(other_day.read_text())
    rows[0]["dateTime"] = "2012-01-11 09:30:00"
    other_day.write_text(json.dumps(rows))
    with pytest.raises(ValueError, match=r"2012-01-10\.json: holds a bar of 2012-01-11"):
        read_day(other_day)
    broken = tmp_path / "2012-01-12.json"
    broken.write_text('[{"dateTime": "2012-01-12 09:30:00", "open": 1}]')
    with pytest.raises(ValueError, match=r"2012-01-12\.json: not a FirstRate day file"):
        read_day(broken)
    (tmp_path / "notes.txt").write_text("not a day")
    assert len(day_files(tmp_path)) == 2
