"""The release calendar: the shipped file is valid and in UTC by its zones' rules, a bad file is
refused with its row and the fix, and a window's input holds only releases known before its
last bar (an emergency cut appears only once it has happened)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features import engine as feature_engine
from model.config import ConfigError, TFTConfig
from model.covariates import NS_PER_MIN, future_covariates
from model.forecaster import ForecastBatch, Forecaster
from model.releases import (
    CALENDAR,
    COLUMNS,
    DECAY_HALFLIFE_MIN,
    RELEASE_NAMES,
    CalendarError,
    ReleaseCalendar,
    ReleaseEvent,
    future_names,
    known_future,
    shipped_calendar,
)
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.train import TrainConfig, train

FOMC = ReleaseEvent.FOMC
ROW = "2008-01-30T19:15Z,FOMC,1,2008-01-23T19:15Z,2008-01-30 14:15 America/New_York,src"


def ns(text: str) -> int:
    return int(pd.Timestamp(text).value)


def write(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "releases.csv"
    path.write_text("# a comment\n" + ",".join(COLUMNS) + "\n" + "\n".join(rows) + "\n")
    return path


def test_the_shipped_calendar_parses_sorted_and_covers_2008_to_2025() -> None:
    calendar = shipped_calendar()
    assert np.all(np.diff(calendar.time) >= 0)
    years = pd.DatetimeIndex(calendar.time.astype("datetime64[ns]")).year
    for event in ReleaseEvent:
        mine = years[calendar.event == event]
        assert set(range(2008, 2024)) <= set(mine), event
    assert (years[calendar.event == FOMC] == 2015).sum() == 8  # eight scheduled meetings


@pytest.mark.parametrize(
    ("release", "utc"),
    [
        ("2008-01-30 14:15 America/New_York", "2008-01-30T19:15Z"),  # EST
        ("2008-03-18 14:15 America/New_York", "2008-03-18T18:15Z"),  # EDT from 2008-03-09
        ("2008-03-06 13:45 Europe/Berlin", "2008-03-06T12:45Z"),  # CET
        ("2008-04-10 13:45 Europe/Berlin", "2008-04-10T11:45Z"),  # CEST from 2008-03-30
        ("2022-09-08 14:15 Europe/Berlin", "2022-09-08T12:15Z"),  # the ECB's later time
    ],
)
def test_release_times_are_utc_by_the_local_zones_rules(release: str, utc: str) -> None:
    lines = [line for line in CALENDAR.read_text().splitlines() if not line.startswith("#")]
    by_local = {row[4]: row[0] for row in csv.reader(lines[1:])}
    assert by_local[release] == utc
    assert ns(utc) in set(shipped_calendar().time.tolist())


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((ROW.replace("19:15Z,FOMC", "18:15Z,FOMC"),), "daylight saving"),
        ((ROW.replace("FOMC", "CPI"),), "use one of"),
        ((ROW.replace(",1,", ",0,"),), "unscheduled"),
        ((ROW, ROW), "sort the file"),
        ((ROW + ",extra",), "expected 6"),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_row_and_the_fix(
    tmp_path: Path, rows: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CalendarError, match=message) as error:
        ReleaseCalendar.read(write(tmp_path, *rows))
    assert "data row" in str(error.value) and str(tmp_path) in str(error.value)


def test_the_input_holds_only_releases_known_before_the_windows_bar() -> None:
    """A release known from a given time shows in the windows whose last bar opens after it,
    and in no earlier one: remove the known-from filter and this fails."""
    release, known = ns("2024-01-31T19:00Z"), ns("2024-01-31T18:55Z")
    calendar = ReleaseCalendar(
        np.array([release]), np.array([FOMC], dtype=np.int8), np.array([known])
    )
    ts = release - np.arange(1, 10) * NS_PER_MIN  # the release 1..9 minutes ahead
    flags = calendar.inputs(ts, 10)[..., RELEASE_NAMES.index("release_fomc")]
    known_then = ts > known
    assert known_then.any() and (~known_then).any()
    for row, steps_ahead in zip(flags, np.arange(1, 10), strict=True):
        expected = np.zeros(10)
        expected[steps_ahead - 1] = ts[steps_ahead - 1] > known
        assert np.array_equal(row, expected)
    assert np.array_equal(calendar.at_minutes(ts, 10), flags > 0)


def test_an_unscheduled_fomc_cut_appears_only_from_its_own_minute_on() -> None:
    calendar = shipped_calendar()
    cut = ns("2020-03-15T22:00Z")  # the Sunday cut to zero
    assert cut in set(calendar.time[calendar.known_from == calendar.time].tolist())
    without = ReleaseCalendar(*(a[calendar.time != cut] for a in vars(calendar).values()))
    decay = RELEASE_NAMES.index("release_decay")
    before = cut + np.arange(-600, 1) * NS_PER_MIN  # the windows up to the cut's own bar
    assert np.array_equal(calendar.inputs(before, 10), without.inputs(before, 10))
    after = np.array([cut + NS_PER_MIN])
    age = np.arange(2, 12)  # minutes from the cut to each bar of the horizon
    expected = 0.5 ** (age / DECAY_HALFLIFE_MIN)
    assert np.allclose(calendar.inputs(after, 10)[0, :, decay], expected, rtol=1e-6)
    assert not calendar.at_minutes(before, 10).any()


def test_the_known_future_input_grows_by_the_release_variables() -> None:
    ts = np.array([ns("2024-01-31T18:55Z")])
    plain = future_covariates(ts, 10)
    full = known_future(ts, 10, shipped_calendar())
    assert full.shape == (1, 10, len(future_names(True)))
    assert np.array_equal(full[..., : plain.shape[2]], plain)
    assert full[0, 4, len(future_names(False)) + FOMC] == 1.0  # 14:00 ET, five minutes on


def test_a_config_saved_before_releases_loads_with_them_off() -> None:
    old = TFTConfig().to_dict()
    del old["releases"]
    assert old["n_future"] == 10
    config = TFTConfig.from_dict(old)
    assert not config.releases and config.n_future == len(future_names(False))
    on = TFTConfig(releases=True)
    assert TFTConfig.from_dict(on.to_dict()) == on and on.n_future == len(future_names(True))
    with pytest.raises(ConfigError, match="known-future inputs"):
        TFTConfig.from_dict(old | {"releases": True})


@pytest.fixture(scope="module")
def trained_with_releases(sixe_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained with releases on, on the month's last 4000 bars (up to the FOMC
    statement of 2024-01-31)."""
    data = tmp_path_factory.mktemp("data") / "6EH4.end.csv"
    frame = pd.read_csv(sixe_csv)
    frame.iloc[-4000:].to_csv(data, index=False)
    out = tmp_path_factory.mktemp("model")
    # the window encoder: its offline forecast of a window is the one served (a stream's
    # depends on the bars its stream carried before the window)
    config = TFTConfig(
        hidden=16, heads=2, lstm_layers=1, var_dim=4, dropout=0.0, releases=True, encoder="window"
    )
    recipe = TrainConfig(epochs=1, windows_per_epoch=256, test_fraction=0.1, progress=False)
    train([data], out, config, recipe)
    return out


def test_a_model_with_releases_serves_what_it_predicts_offline(
    trained_with_releases: Path, sixe_bars: pd.DataFrame
) -> None:
    """The engine serves a releases checkpoint with the calendar it was trained with: its
    quantiles are the offline forecaster's, and they move with the coming FOMC statement."""
    engine = ForecastEngine(trained_with_releases, "cpu")
    forecaster = Forecaster(trained_with_releases, device="cpu")
    assert forecaster.config.releases and forecaster.calendar is not None
    values, warm = feature_engine.compute_batch(
        sixe_bars["ts_event"].to_numpy(),
        *(sixe_bars[c].to_numpy() for c in ("open", "high", "low", "close", "volume")),
        np.zeros(len(sixe_bars), dtype=np.bool_),
    )
    statement = np.flatnonzero(sixe_bars["ts_event"].to_numpy() == ns("2024-01-31T19:00Z"))[0]
    last = np.arange(statement - 9, statement + 1)  # windows with the statement ahead
    lookback = forecaster.config.lookback
    windows = np.stack([values[t - lookback + 1 : t + 1] for t in last])
    ts = sixe_bars["ts_event"].to_numpy()[last]
    close = sixe_bars["close"].to_numpy()[last]
    offline = forecaster.predict(ForecastBatch(["6EH4"] * len(last), ts, close, windows))
    requests = [
        WindowRequest("6EH4", b"6EH4", 0, int(t) + 1, windows[i], int(ts[i]), float(close[i]), 0)
        for i, t in enumerate(last)
    ]
    served = engine.predict(requests, incremental=False)
    assert warm[last[0] - lookback + 1 :].all()
    assert np.allclose(served, offline.quantiles, rtol=1e-5, atol=1e-9)
    calendar = forecaster.calendar
    kept = calendar.time != ns("2024-01-31T19:00Z")
    without = ReleaseCalendar(*(a[kept] for a in vars(calendar).values()))
    engine.served.forecaster.calendar = without
    assert not np.allclose(engine.predict(requests, incremental=False), served)
