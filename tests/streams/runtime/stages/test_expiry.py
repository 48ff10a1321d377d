"""A symbol's expiry (BARCAST_EXPIRE_DAYS) without a broker: the corrections stage drops the
state of a symbol its partition's bars have left behind and sends an EXPIRED record on; the
features stage drops its state there, so the symbol's next bars are computed as a new symbol's;
the bars tell the time, not a replay's wall-clock END_OF_INTERVAL; a stage restored from a
commit after the expiry goes on as the one never stopped."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from features.corrections import Reason, Status, bars_from_frame, correct_history
from model.covariates import NS_PER_DAY, NS_PER_MIN
from streams.metrics import Metrics
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import Pipeline, build_pipeline
from streams.runtime.records import CleanBar, FeatureRow, Out, Record, stage_control
from streams.runtime.stages.features import pieces
from streams.runtime.stores import Store
from streams.schema import (
    CONTROL_HEADERS,
    CONTROL_KEY,
    DLQ_MESSAGE,
    ControlKind,
    encode,
    end_of_interval,
)
from streams.schema import expired as expired_record
from streams.settings import Settings
from tests.bar_streams import expected_features
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.stages.test_carried import commit, forecast, published
from tests.streams.runtime.stages.test_carried import stage as forecast_stage
from tests.streams.runtime.stages.test_forecasts import START, SYMBOLS, rows
from tests.streams.runtime.test_stores import MemoryChangelogs, flush

EXPIRE_DAYS = 0.1  # 144 minutes
GONE, BACK, END = 100, 500, 600  # A trades bars [0, GONE) and [BACK, END) of the month; B all
CUT = 3 * GONE + 2 * (BACK - GONE) - 10  # records: past A's expiry, before its return


def stream(bars: pd.DataFrame) -> list[Record]:
    """`bars.raw` of symbols A and B on one partition, minute by minute, each minute closed
    by an END_OF_INTERVAL; A stops for the bars between GONE and BACK, hours of them."""
    a = bars_from_frame(bars.iloc[:END], symbol="A", instrument_id=1, source="test")
    b = bars_from_frame(bars.iloc[:END], symbol="B", instrument_id=2, source="test")
    values: list[tuple[bytes, bytes, list]] = []
    for i in range(END):
        values.append((b"B", orjson.dumps(b[i]), []))
        if not GONE <= i < BACK:
            values.append((b"A", orjson.dumps(a[i]), []))
        close = encode(end_of_interval(b[i]["ts_event"]))
        values.append((CONTROL_KEY, close, CONTROL_HEADERS))
    return [Record("bars.raw", 0, i, 0.0, *value) for i, value in enumerate(values)]


def stages(io: MemoryChangelogs) -> Pipeline:
    settings = Settings(role="stream", expire_days=EXPIRE_DAYS)
    runtime = Runtime(settings, Metrics(), "t", lambda topic: {0}, asyncio.sleep)
    runtime.changelogs = io  # type: ignore[assignment]
    return build_pipeline(settings, runtime)


def run(pipeline: Pipeline, records: list[Record]) -> tuple[list[Out], list[FeatureRow]]:
    """Clean outputs and feature rows of `records`, in batches of 100."""
    assert pipeline.corrections is not None and pipeline.features is not None
    clean, rows = [], []
    for start in range(0, len(records), 100):
        cleaned = pipeline.corrections.run(records[start : start + 100], time.time_ns())
        clean += [o for o in cleaned.outputs if o.topic == "bars.clean"]
        rows += [r for r in pipeline.features.run(cleaned.items).rows if isinstance(r, FeatureRow)]
    return clean, rows


def restored(io: MemoryChangelogs, pipeline: Pipeline, boundary: int) -> Pipeline:
    """The stages restored from `io` as of `boundary`, once `pipeline`'s stores are flushed."""

    async def restore() -> Pipeline:
        for store in pipeline.stores:
            await flush(store)
        again = stages(io)
        for store in again.stores:
            await store.restore(0, boundary)
        return again

    return asyncio.run(restore())


def symbol_rows(rows: list[FeatureRow], key: bytes) -> np.ndarray:
    return np.array([r.values for r in rows if r.key == key])


def test_a_symbol_left_behind_expires_and_comes_back_new(sixe_bars: pd.DataFrame) -> None:
    records = stream(sixe_bars)
    pipeline = stages(MemoryChangelogs())
    clean, rows = run(pipeline, records)
    expiries = [orjson.loads(o.value) for o in clean if b'"control":"expired"' in o.value]
    a_ts = sixe_bars.ts_event.to_numpy()[:END]
    last = int(a_ts[GONE - 1])
    newest = int(min(t for t in a_ts if t > last + EXPIRE_DAYS * NS_PER_DAY))
    assert expiries == [expired_record(newest, "A", last)]  # at the first minute past it
    assert pipeline.corrections is not None and pipeline.corrections.stats.expired == 1
    expired_at = next(o for o in clean if b'"control":"expired"' in o.value)
    assert (expired_at.key, expired_at.partition) == (b"A", 0)
    # A's bars after its return are computed from a new state, B's from its one state
    a_back = [orjson.loads(r.value) for r in records[-3 * (END - BACK) :] if r.key == b"A"]
    values, _ = expected_features(correct_history(a_back).clean)
    assert np.array_equal(symbol_rows(rows, b"A")[-len(values) :], values, equal_nan=True)
    b_all = [orjson.loads(r.value) for r in records if r.key == b"B"]
    values, _ = expected_features(correct_history(b_all).clean)
    assert np.array_equal(symbol_rows(rows, b"B"), values, equal_nan=True)


def test_a_replays_wall_clock_end_expires_nothing(sixe_bars: pd.DataFrame) -> None:
    records = stream(sixe_bars)[: 3 * GONE]
    now = encode(end_of_interval(time.time_ns()))
    records.append(Record("bars.raw", 0, len(records), 0.0, CONTROL_KEY, now, CONTROL_HEADERS))
    clean, _ = run(stages(MemoryChangelogs()), records)
    assert not [o for o in clean if b'"control":"expired"' in o.value]


def test_a_key_of_rejected_records_only_leaves_silently(sixe_bars: pd.DataFrame) -> None:
    records = stream(sixe_bars)[: 3 * GONE]
    junk = Record("bars.raw", 0, 0, 0.0, b"junk", b"not a bar", [])
    record = expired_record(int(sixe_bars.ts_event.iloc[5]), "B", 0)
    forged = Record("bars.raw", 0, 1, 0.0, b"B", encode(record), CONTROL_HEADERS)
    renumbered = [replace(r, offset=i + 2) for i, r in enumerate(records)]
    pipeline = stages(MemoryChangelogs())
    clean, rows = run(pipeline, [junk, forged, *renumbered])
    assert pipeline.corrections is not None
    assert sorted(pipeline.corrections.store.keys_in(0)) == [b"A", b"B"]  # junk: dropped
    assert not [o for o in clean if b'"control":"expired"' in o.value]  # forged: a dead letter
    offline = correct_history([record]).outcomes  # as the offline corrections take it
    assert [(o.status, o.reason) for o in offline] == [(Status.REJECTED, Reason.MALFORMED)]
    assert "the corrections stage's own" in offline[0].message
    _, plain = run(stages(MemoryChangelogs()), renumbered)
    assert np.array_equal(symbol_rows(rows, b"B"), symbol_rows(plain, b"B"), equal_nan=True)


def test_a_stage_restored_after_an_expiry_goes_on_as_never_stopped(
    sixe_bars: pd.DataFrame,
) -> None:
    records = stream(sixe_bars)
    whole_clean, whole_rows = run(stages(MemoryChangelogs()), records)
    io = MemoryChangelogs()
    first = stages(io)
    run(first, records[:CUT])
    again = restored(io, first, CUT)
    assert again.corrections is not None and again.features is not None
    assert again.corrections.store.keys_in(0) == [b"B"]
    assert list(again.features.store.changelog.entries) == [b"B"]
    clean, rows = run(again, records[CUT:])
    assert [o.value for o in clean] == [o.value for o in whole_clean[-len(clean) :]]
    assert [r.values.tobytes() for r in rows] == [
        r.values.tobytes() for r in whole_rows[-len(rows) :]
    ]


def test_a_bar_from_before_an_expiry_published_again_is_a_repeat(sixe_bars: pd.DataFrame) -> None:
    """An upstream restart re-publishes the symbol's last bar after the features stage took its
    expiry: a repeat (no row, no state), for a stage restored from the changelog too."""
    io = MemoryChangelogs()
    pipeline = stages(io)
    clean, _ = run(pipeline, stream(sixe_bars)[:CUT])
    last = next(o for o in reversed(clean) if o.key == b"A" and b"control" not in o.value)
    again = CleanBar("bars.clean", b"A", 0, CUT, 0.0, orjson.loads(last.value), None)
    for stage in (pipeline, restored(io, pipeline, CUT)):
        assert stage.features is not None
        assert stage.features.run([again]).rows == []
        assert b"A" not in stage.features.store.states


def test_a_raw_bar_from_before_an_expiry_sent_again_is_late(sixe_bars: pd.DataFrame) -> None:
    """Ingest sends the expired symbol's last bar again (a replay run twice): the corrections
    stage rejects it as late, as it would had the symbol never expired, and publishes what it
    publishes without it. The store keeps the symbol's last bar time, and a restore finds it,
    right after the rejection as after the next END_OF_INTERVAL; once the symbol is back, its
    state says the same of the bar, in the words it would use had the symbol never expired."""
    records = stream(sixe_bars)
    io = MemoryChangelogs()
    pipeline = stages(io)
    run(pipeline, records[:CUT])
    last = next(r for r in reversed(records[: 3 * GONE]) if r.key == b"A")
    again = [replace(last, offset=CUT), *(replace(r, offset=r.offset + 1) for r in records[CUT:])]
    last_ts = orjson.loads(last.value)["ts_event"]
    clean, _ = run(pipeline, again[:1])
    notes = [restored(io, pipeline, CUT + 1).corrections]  # a commit right after the rejection
    more, _ = run(pipeline, again[1:])
    notes.append(restored(io, pipeline, CUT + 3).corrections)  # after the next END_OF_INTERVAL
    assert [n.store.gone if n else None for n in notes] == [{b"A": last_ts}] * 2
    whole, _ = run(stages(MemoryChangelogs()), records)
    clean += more
    assert [o.value for o in clean] == [o.value for o in whole[-len(clean) :]]
    assert pipeline.corrections is not None
    assert pipeline.corrections.stats.rejections[Reason.LATE] == 1
    late = replace(last, offset=len(again) + CUT)
    cleaned = pipeline.corrections.run([late], time.time_ns())
    why = [dict(o.headers)[DLQ_MESSAGE].decode() for o in cleaned.outputs]
    assert len(why) == 1 and "expired" not in why[0] and "the symbol's last bar" in why[0]


def test_the_features_stage_cuts_a_batch_at_an_expiry_of_a_symbol_it_holds(
    sixe_bars: pd.DataFrame,
) -> None:
    values = bars_from_frame(sixe_bars.iloc[:20], symbol="A", instrument_id=1, source="test")
    bars = [CleanBar("bars.clean", b"A", 0, i, 0.0, v, None) for i, v in enumerate(values)]  # type: ignore[arg-type]
    expiry = stage_control("bars.clean", 0, 10, b"A", expired_record(10, "A", 1))
    assert expiry.kind == ControlKind.EXPIRED
    items = [*bars[:10], expiry, *bars[10:]]
    assert pieces(items) == [items[:10], items[10:]]
    alone = items[10:]
    assert pieces(alone) == [alone]  # no bar of A before its expiry
    pipeline = stages(MemoryChangelogs())
    assert pipeline.features is not None
    rows = [r for r in pipeline.features.run(items).rows if isinstance(r, FeatureRow)]
    fresh, _ = expected_features(values[10:])  # type: ignore[arg-type]
    assert np.array_equal(np.array([r.values for r in rows[10:]]), fresh, equal_nan=True)


SCORING_OFF = Settings(
    online_scoring=False, online_calibration=False, shadow_baselines=False, canary=False
)


@pytest.mark.parametrize("scoring", [Settings(), SCORING_OFF], ids=["scored", "unscored"])
@pytest.mark.parametrize("encoder", ["window", "stream"])
def test_the_forecast_stage_drops_an_expired_symbols_states(
    tmp_path: Path, encoder: str, scoring: Settings
) -> None:
    make_checkpoint(tmp_path / "model", encoder=encoder)
    io = MemoryChangelogs()
    stage, producer = forecast_stage(io, tmp_path / "model", scoring)
    gone, kept = SYMBOLS[0].encode(), SYMBOLS[1].encode()
    record = expired_record(START + 80 * NS_PER_MIN, SYMBOLS[0], START)
    expiry = stage_control("features", 0, 160, gone, record)  # after minute 79's rows
    served = stage.engine.served

    def held(store: Store, key: bytes) -> list[bytes]:
        entries = [k for k in store.changelog.entries if k == key or k.startswith(key + b"\0")]
        return entries + [key] * (key in store.states)

    def cached(symbol: str) -> list[str]:
        return [name for name in ("cache", "static", "streams") if symbol in getattr(served, name)]

    async def run() -> None:
        await forecast(stage, range(79))
        await commit(stage)
        holding = [s for s in stage.stores if held(s, gone)]
        # windows, and a stream encoder's streams; scored, scores, calibrations and shadows
        assert len(holding) == 1 + (encoder == "stream") + 3 * scoring.online_scoring
        assert (
            cached(SYMBOLS[0]) == ["cache", "static"]
            if encoder == "window"
            else ["static", "streams"]
        )
        stage.serving.engines.clear()  # as when the first checkpoint came after the start
        await stage.add(rows(79))  # its bar and forecast in flight, to settle before
        await stage.add([expiry])
        await commit(stage)
        await stage.add([r for r in rows(0) if r.key == gone])  # re-published from before
        await commit(stage)
        assert not any(held(store, gone) for store in stage.stores)
        assert all(held(store, kept) for store in holding) and cached(SYMBOLS[0]) == []
        assert gone not in stage.scoring.waiting and gone not in stage.scoring.uncalibrated
        if stage.scoring.shadows is not None:
            assert gone not in stage.scoring.shadows.symbols_in(0)
        again, _ = forecast_stage(io, tmp_path / "model", scoring)
        for store, before in zip(again.stores, stage.stores, strict=True):
            await store.restore(0, boundary=161)
            assert store.changelog.entries == before.changelog.entries
        producer.calls.clear()
        await forecast(stage, range(81, 81 + stage.lookback))  # its window fills again
        forecasts = published(producer, stage.settings.topic_forecasts)
        assert [ts for symbol, ts in forecasts if symbol == SYMBOLS[0]] == [
            START + (80 + stage.lookback) * NS_PER_MIN
        ]
        assert len([1 for symbol, _ in forecasts if symbol == SYMBOLS[1]]) == stage.lookback

    asyncio.run(run())
