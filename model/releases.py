"""The scheduled-release calendar (`model/releases.csv`) and the known-future input built from it.

A window whose last bar opens at ts_event sees only releases known before ts_event: a scheduled
release from a week before it (the file's `known_from_utc`), an unscheduled one (an emergency
FOMC cut) only from windows whose last bar opens after it happened. For each future minute
k = 1..horizon the input holds, per event, whether that event is released in the bar opening
then, and a decay since the latest release up to that bar (1 at the release, halving every
`DECAY_HALFLIFE_MIN`): what is known of the coming minutes, and how fresh the last shock is.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from functools import cache
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from model.covariates import FUTURE_NAMES, NS_PER_MIN, future_covariates

CALENDAR = Path(__file__).with_name("releases.csv")
COLUMNS = ("release_utc", "event", "scheduled", "known_from_utc", "local_time", "source")
# Volatility after a policy decision fades over tens of minutes (the press conference follows
# within 30-45), not within the 10-minute horizon, so the decay outlives the horizon.
DECAY_HALFLIFE_MIN = 30.0
UTC_FORMAT = "%Y-%m-%dT%H:%MZ"


class ReleaseEvent(IntEnum):  # alphabetical, the file's order within a minute
    ECB = 0
    FOMC = 1


RELEASE_NAMES = (*(f"release_{e.name.lower()}" for e in ReleaseEvent), "release_decay")
N_RELEASE = len(RELEASE_NAMES)


class CalendarError(ValueError):
    """A release calendar file that cannot be used; the message names the row and the fix."""


@dataclass(frozen=True)
class ReleaseCalendar:
    """Releases sorted by time (then event): each one's UTC ns minute, event and known-from."""

    time: np.ndarray  # (n,) int64 UTC ns, the open of the bar the release falls in
    event: np.ndarray  # (n,) int8 ReleaseEvent
    known_from: np.ndarray  # (n,) int64 UTC ns, <= time

    @classmethod
    def read(cls, path: Path = CALENDAR) -> ReleaseCalendar:
        rows = []
        with open(path, newline="") as f:
            lines = (line for line in f if not line.startswith("#"))
            reader = csv.reader(lines)
            header = next(reader, None)
            if tuple(header or ()) != COLUMNS:
                raise CalendarError(f"{path}: header {header}; expected {','.join(COLUMNS)}")
            for number, row in enumerate(reader, start=1):
                rows.append(_parse(row, f"{path}: data row {number}"))
        order = [(t, e) for t, e, _ in rows]
        for i in range(1, len(order)):
            if order[i] <= order[i - 1]:
                raise CalendarError(
                    f"{path}: data row {i + 1} is not after the row before it (by release_utc, "
                    "then event); sort the file and drop duplicates"
                )
        array = np.array(rows, dtype=np.int64).reshape(-1, 3)
        return cls(array[:, 0], array[:, 1].astype(np.int8), array[:, 2])

    def hits(self, ts_event: np.ndarray, horizon: int) -> np.ndarray:
        """`(B, horizon + 1, n_events)` bool: a release of each event in the bar opening k = 0..
        horizon minutes after each ts_event, among those known before ts_event."""
        ts = np.asarray(ts_event, dtype=np.int64)
        minutes = ts[:, None] + np.arange(horizon + 1) * NS_PER_MIN
        out = np.zeros((len(ts), horizon + 1, len(ReleaseEvent)), dtype=bool)
        for event in ReleaseEvent:
            mine = self.event == event
            times, known = self.time[mine], self.known_from[mine]
            if not len(times):
                continue
            at = np.minimum(np.searchsorted(times, minutes), len(times) - 1)
            out[..., event] = (times[at] == minutes) & (known[at] < ts[:, None])
        return out

    def inputs(self, ts_event: np.ndarray, horizon: int) -> np.ndarray:
        """`(B, horizon, N_RELEASE)` float32: each event's release flag at minutes 1..horizon
        after ts_event and the decay since the latest known release up to each minute."""
        ts = np.asarray(ts_event, dtype=np.int64)
        hits = self.hits(ts, horizon)
        # Every release before ts_event is known by then (known_from <= time), so the latest of
        # them needs no filter; releases from ts_event on count only where `hits` kept them.
        before = np.searchsorted(self.time, ts, side="left") - 1
        steps = np.arange(horizon + 1)
        last_hit = np.maximum.accumulate(np.where(hits.any(axis=2), steps, -1), axis=1)
        age = np.where(
            last_hit >= 0,
            steps - last_hit,
            (ts - np.concatenate([[0], self.time])[before + 1])[:, None] / NS_PER_MIN + steps,
        )
        seen = (last_hit >= 0) | (before >= 0)[:, None]
        decay = np.where(seen, 0.5 ** (age / DECAY_HALFLIFE_MIN), 0.0)
        flags = hits[:, 1:].astype(np.float32)
        return np.concatenate([flags, decay[:, 1:, None]], axis=2).astype(np.float32)

    def at_minutes(self, ts_event: np.ndarray, horizon: int) -> np.ndarray:
        """`(B, horizon)` bool: any known release in the bar k = 1..horizon minutes ahead."""
        return self.hits(ts_event, horizon)[:, 1:].any(axis=2)


def future_names(releases: bool) -> tuple[str, ...]:
    """The known-future variables of a model, in input order."""
    return FUTURE_NAMES + (RELEASE_NAMES if releases else ())


def known_future(
    ts_event: np.ndarray, horizon: int, calendar: ReleaseCalendar | None
) -> np.ndarray:
    """A model's known-future inputs `(B, horizon, len(future_names(...)))` float32: the
    calendar variables (`model.covariates.future_covariates`), then the releases' if given."""
    ts = np.asarray(ts_event, dtype=np.int64)
    calendar_inputs = future_covariates(ts, horizon)
    if calendar is None:
        return calendar_inputs
    return np.concatenate([calendar_inputs, calendar.inputs(ts, horizon)], axis=2)


@cache
def shipped_calendar() -> ReleaseCalendar:
    """The calendar shipped with barcast, read once per process."""
    return ReleaseCalendar.read(CALENDAR)


def release_calendar(releases: bool) -> ReleaseCalendar | None:
    """The calendar a model with `releases` on reads; None when off."""
    return shipped_calendar() if releases else None


def _parse(row: list[str], where: str) -> tuple[int, int, int]:
    """(release ns, event, known-from ns) of one data row, checked against its local time."""
    if len(row) != len(COLUMNS):
        raise CalendarError(f"{where}: {len(row)} fields; expected {len(COLUMNS)}: {COLUMNS}")
    release, event, scheduled, known, local, source = (v.strip() for v in row)
    if event not in ReleaseEvent.__members__:
        events = list(ReleaseEvent.__members__)
        raise CalendarError(f"{where}: event {event!r}; use one of {events}")
    if scheduled not in ("0", "1") or not source:
        raise CalendarError(f"{where}: scheduled must be 0 or 1 and the source must be named")
    time, known_from = _utc_ns(release, where), _utc_ns(known, where)
    if _local_ns(local, where) != time:
        raise CalendarError(
            f"{where}: local_time {local!r} is not release_utc {release}; convert the local time "
            "with its zone's rules (daylight saving included)"
        )
    if known_from > time or (scheduled == "0" and known_from != time):
        raise CalendarError(
            f"{where}: known_from_utc {known} must be at or before the release, and equal to it "
            "for an unscheduled release (no one knew of it before)"
        )
    return time, ReleaseEvent[event], known_from


def _utc_ns(text: str, where: str) -> int:
    try:
        moment = datetime.strptime(text, UTC_FORMAT).replace(tzinfo=ZoneInfo("UTC"))
    except ValueError as exc:
        fix = f"{where}: {text!r} is not a UTC minute like 2008-01-30T19:15Z"
        raise CalendarError(fix) from exc
    return int(moment.timestamp()) * 1_000_000_000


def _local_ns(text: str, where: str) -> int:
    fix = f"{where}: local_time {text!r}; write it like '2008-01-30 14:15 America/New_York'"
    parts = text.split(" ")
    if len(parts) != 3:
        raise CalendarError(fix)
    day, clock, zone = parts
    try:
        moment = datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M")
        return int(moment.replace(tzinfo=ZoneInfo(zone)).timestamp()) * 1_000_000_000
    except (ValueError, ZoneInfoNotFoundError) as exc:
        raise CalendarError(fix) from exc
