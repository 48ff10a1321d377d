"""The forecast stage's scoring and online calibration (streams.runtime.stages.scores), without a
broker: its scores equal `score_offline` of what it published, its calibrated forecasts do not
depend on how far the bars ran ahead of the forecasts, and its stores restore exactly as of a
checkpoint, the replay from there publishing the same bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest

from features.bars import PRICE_SCALE
from model.covariates import NS_PER_DAY, NS_PER_MIN
from model.serving.conformal import CalibrationConfig, SymbolCalibration, calibrate_offline
from model.serving.forecast_engine import WindowRequest
from model.serving.scoring import decode_score, score_offline
from model.serving.scoring_state import SymbolScoring, pooled_figures
from streams.runtime.changelog import Changelog
from streams.runtime.records import FeatureRow
from streams.runtime.stages.scores import Scores, Scoring
from streams.runtime.stores import StateStore
from tests.model.serving.test_scoring import random_history
from tests.streams.runtime.test_stores import MemoryChangelogs, flush

SYMBOLS = ("6EH4", "ESU4")
TOPIC = "forecasts.scores"
CONFIG = CalibrationConfig()


def scoring(
    io: MemoryChangelogs, enabled: bool = True, window: int = 240, retention: int = 1440
) -> Scoring:
    scores = StateStore(
        Changelog("t-scoring-state-changelog", io),
        SymbolScoring.decoder(window),
        SymbolScoring.to_bytes,
        lambda: SymbolScoring(window, retention),
    )
    calibrations = StateStore(
        Changelog("t-calibration-state-changelog", io),
        SymbolCalibration.from_bytes,
        SymbolCalibration.to_bytes,
        SymbolCalibration,
    )
    return Scoring(scores, calibrations, CalibrationConfig(enabled=enabled), TOPIC)


# ("bar", offset, (row, requested)) or ("forecast", offset, (request, value))
Event = tuple[str, int, Any]


def events(lag: int, seed: int = 0) -> tuple[list[Event], list[dict[str, Any]]]:
    """Each symbol's bars as feature rows (one source offset each, symbols interleaved), and
    each forecast `lag` rows after its own, as a busy forecaster would publish it; and the
    `bars.clean` values."""
    rows: list[tuple[FeatureRow, dict[str, Any] | None]] = []
    clean: list[dict[str, Any]] = []
    for i, symbol in enumerate(SYMBOLS):
        bars, forecasts = random_history(symbol, seed + i, minutes=600)
        # Plain floats, as a worker's values are (random_history's are numpy scalars).
        by_ts = {f["ts_event"]: orjson.loads(orjson.dumps(f, default=float)) for f in forecasts}
        clean += bars
        for bar in bars:
            row = FeatureRow(
                symbol.encode(), 0, 0, 0.0, None, symbol, bar["ts_event"],
                bar["close"] * PRICE_SCALE, bar["status"] == "synthetic", True,
                np.zeros(0), "f",
            )  # fmt: skip
            rows.append((row, by_ts.get(bar["ts_event"])))
    rows.sort(key=lambda item: (item[0].ts_event, item[0].symbol))
    out: list[Event] = []
    due: list[tuple[int, Event]] = []
    for offset, (row, value) in enumerate(rows):
        row.offset = offset
        out.append(("bar", offset, (row, value is not None)))
        if value is not None:
            due.append((offset + lag, ("forecast", offset, (request(row), value))))
        out += [event for at, event in due if at <= offset]
        due = [(at, event) for at, event in due if at > offset]
    return out + [event for _, event in due], clean


def request(row: FeatureRow) -> WindowRequest:
    return WindowRequest(
        row.symbol, row.key, row.partition, 0, np.zeros(0), row.ts_event, row.close, 0
    )


def run(stage: Scoring, stream: list[Event]) -> Iterator[tuple[str, bytes]]:
    """What the stage publishes, in order: ("forecast", value) and ("score", value). The bars
    between two forecasts are scored together, as the rows of one agent's batch."""
    for kind, _, item in [*stream, ("end", 0, None)]:
        out = Scores()
        if kind == "bar":
            row, requested = item
            stage.bar(row, request(row) if requested else None, None)
            continue
        if kind == "forecast":
            (value,) = stage.forecasts([item[0]], [item[1]], None, out)
            yield "forecast", orjson.dumps(value)
        stage.settle(out)
        for record in out.outputs:
            assert (
                record.topic == TOPIC
                and record.key == orjson.loads(record.value)["symbol"].encode()
            )
            yield "score", record.value


def published(stage: Scoring, stream: list[Event]) -> tuple[dict[Any, bytes], dict[Any, bytes]]:
    forecasts, scores = {}, {}
    for kind, value in run(stage, stream):
        decoded = orjson.loads(value)
        key = (decoded["symbol"], decoded["ts_event"])
        target = forecasts if kind == "forecast" else scores
        assert key not in target, f"{kind} {key} published twice"
        target[key] = value
    return forecasts, scores


@pytest.mark.parametrize("lag", [0, 7, 40])
def test_scores_equal_score_offline_of_the_published_forecasts(lag: int) -> None:
    stream, clean = events(lag)
    forecasts, scores = published(scoring(MemoryChangelogs()), stream)
    offline = score_offline([orjson.loads(v) for v in forecasts.values()], clean)
    assert len(scores) > 1000 and scores.keys() == offline.keys()
    assert all(decode_score(scores[key]) == offline[key] for key in offline)
    assert {decode_score(v)["unscored"] for v in scores.values()} >= {None, "gap_fill"}


def test_calibrated_forecasts_do_not_depend_on_how_far_bars_ran_ahead() -> None:
    stream, clean = events(0)
    first, _ = published(scoring(MemoryChangelogs()), stream)
    later, _ = published(scoring(MemoryChangelogs()), events(40)[0])
    raw, _ = published(scoring(MemoryChangelogs(), enabled=False), stream)
    assert first == later
    models = [orjson.loads(v) for v in raw.values()]
    offline = calibrate_offline(models, sorted(clean, key=lambda b: b["ts_event"]), CONFIG)
    assert [orjson.dumps(v) for v in offline] == list(first.values())
    calibrated = [orjson.loads(v) for v in first.values()]
    assert all(v["schema_version"] == 2 for v in calibrated)
    assert any(v["q90"] != v["raw_q90"] for v in calibrated)
    assert all("raw_q90" not in orjson.loads(v) for v in raw.values())


def test_a_symbol_that_stopped_trading_leaves_the_pooled_figures() -> None:
    """ESU4 expires: a week after its last bar, the gauges pool 6EH4's figures alone."""
    stage = scoring(MemoryChangelogs())
    stream, _ = events(lag=0)
    list(run(stage, stream))
    states = stage.scores.states
    row, _ = next(item for kind, _, item in reversed(stream) if kind == "bar")
    for days in (0, 6, 8):  # 6EH4 trades on; ESU4's last bar recedes
        later = replace(row, symbol="6EH4", key=b"6EH4", ts_event=row.ts_event + days * NS_PER_DAY)
        stage.bar(later, None, None)
        stage.settle(Scores())
        both = pooled_figures([states[s.encode()].rolling for s in SYMBOLS])
        alone = pooled_figures([states[b"6EH4"].rolling])
        assert both != alone
        assert stage.figures() == (both if days < 7 else alone), days


def rolled_back(lag: int) -> tuple[list[Event], list[dict[str, Any]]]:
    """`events(lag)` with a checkpoint swap and a rollback within H minutes: model "B" serves
    minutes 200-202, then the first model again."""
    stream, clean = events(lag)
    for kind, _, item in stream:
        if kind == "forecast":
            minute = (item[1]["ts_event"] - clean[0]["ts_event"]) // NS_PER_MIN
            item[1]["model_id"] = "B" if 200 <= minute < 203 else item[1]["model_id"]
    return stream, clean


@pytest.mark.parametrize("lag", [0, 7, 40])
def test_a_rollback_calibrates_as_calibrate_offline(lag: int) -> None:
    """A score of the first model decided while "B" served, or by the bar of the rollback,
    reaches the calibration before or after the swap back depending on the order of work; it
    counts in neither case, so the stage equals the offline replay, whatever the lag."""
    stream, clean = rolled_back(lag)
    calibrated, _ = published(scoring(MemoryChangelogs()), stream)
    raw, _ = published(scoring(MemoryChangelogs(), enabled=False), stream)
    models = [orjson.loads(v) for v in raw.values()]
    offline = calibrate_offline(models, sorted(clean, key=lambda b: b["ts_event"]), CONFIG)
    served = {orjson.loads(v)["model_id"] for v in calibrated.values()}
    assert served == {"B", models[0]["model_id"]}
    assert [orjson.dumps(v) for v in offline] == list(calibrated.values())


def test_bars_far_ahead_of_their_forecasts_change_nothing() -> None:
    """An agent's batch may hold thousands of one symbol's rows before the model's first forecast
    of them, more bars than a scoring state retains. They wait for the forecasts (lockstep), so
    nothing is scored late and every score and calibrated forecast is as with no lag."""
    stream, _ = events(0)
    expected = published(scoring(MemoryChangelogs(), retention=50), stream)
    lagging = published(scoring(MemoryChangelogs(), retention=50), events(400)[0])
    assert len(expected[1]) > 1000 and lagging == expected
    assert all(decode_score(v)["unscored"] != "late" for v in lagging[1].values())


def drained_at(stream: list[Event], boundary: int) -> tuple[list[Event], int]:
    """The stream with a checkpoint before the row at offset `boundary`: every forecast of an
    earlier row published before it (the checkpoint drains the forecaster); and its index."""
    early = [e for e in stream if e[0] == "forecast" and e[1] < boundary]
    rest = [e for e in stream if e not in early]
    at = next(i for i, (kind, offset, _) in enumerate(rest) if kind == "bar" and offset == boundary)
    before = [e for e in rest[:at]] + [e for e in early if e not in rest[:at]]
    before.sort(key=stream.index)
    return before + rest[at:], len(before)


def by_key(outputs: list[tuple[str, bytes]]) -> dict[tuple[str, str, int], bytes]:
    """De-duplicated by kind, symbol and ts_event; a repeat must repeat every byte."""
    out: dict[tuple[str, str, int], bytes] = {}
    for kind, value in outputs:
        decoded = orjson.loads(value)
        key = (kind, decoded["symbol"], decoded["ts_event"])
        assert out.setdefault(key, value) == value, f"{key} changed on a replay"
    return out


def test_a_restore_as_of_a_checkpoint_replays_the_same_bytes() -> None:
    stream, _ = events(7)
    uninterrupted = by_key(list(run(scoring(MemoryChangelogs()), stream)))
    drained, at = drained_at(stream, 700)
    io = MemoryChangelogs()
    stage = scoring(io)
    outputs = list(run(stage, drained[:at]))

    async def crash_and_restore() -> Scoring:
        await asyncio.gather(*(flush(store) for store in stage.stores))  # the checkpoint
        outputs.extend(run(stage, drained[at : at + 300]))
        await asyncio.gather(*(flush(store) for store in stage.stores))  # one never marked
        restored = scoring(io)
        for store in restored.stores:
            await store.restore(0, 700)
        return restored

    restored = asyncio.run(crash_and_restore())
    replayed = list(run(restored, drained[at:]))
    assert sum(kind == "score" for kind, _ in replayed) > 400
    assert by_key(outputs + replayed) == uninterrupted


def test_a_restart_with_calibration_off_queues_no_score_in_the_restored_calibrations() -> None:
    """BARCAST_ONLINE_CALIBRATION turned off across a restart: the calibrations restored from
    the run with it on take no score, which nothing would ever apply."""
    stream, _ = events(0)
    drained, at = drained_at(stream, 400)
    io = MemoryChangelogs()
    stage = scoring(io)
    list(run(stage, drained[:at]))

    async def restart_with_calibration_off() -> Scoring:
        await asyncio.gather(*(flush(store) for store in stage.stores))
        restored = scoring(io, enabled=False)
        for store in restored.stores:
            await store.restore(0, 400)
        return restored

    off = asyncio.run(restart_with_calibration_off())
    restored = [off.calibrations.read(key) for key in (b"ESU4", b"6EH4")]
    assert all(state.model_id is not None for state in restored)  # calibrating when stopped
    waiting = [len(state.waiting) for state in restored]
    assert sum(kind == "score" for kind, _ in run(off, drained[at:])) > 400
    assert [len(state.waiting) for state in restored] == waiting


def test_with_scoring_off_forecasts_pass_untouched_and_nothing_is_stored_or_scored() -> None:
    stream, _ = events(lag=0)
    stores = scoring(MemoryChangelogs())
    off = Scoring(stores.scores, stores.calibrations, CONFIG, TOPIC, enabled=False)
    published = list(run(off, stream))
    sent = [orjson.loads(value) for kind, value in published if kind == "forecast"]
    expected = [orjson.loads(orjson.dumps(item[1])) for kind, _, item in stream if kind != "bar"]
    assert sent == expected and len(sent) > 0
    assert all(kind == "forecast" for kind, _ in published)
    assert off.stores == [] and not off.scores.states and not off.calibrations.states
