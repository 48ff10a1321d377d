"""A canary in the forecast stage (streams.runtime.stages.serving) without a broker: at a
partition's first row of an event minute the stage syncs (flush and score) only if rows of that
partition before it are not all scored yet. After the quiet's drain, a burst's rows of every
partition go through the models in one batch, not a partition at a time; and the verdict, and
every record published, are the same as a stage's that had to sync at every minute."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from features.engine import FINGERPRINT, N_FEATURES
from model.covariates import NS_PER_MIN
from model.serving.canary import PartitionCanary
from model.serving.checkpoints import PROMOTE, CheckpointWatcher
from model.serving.forecast_engine import ForecastEngine
from model.serving.offline import DELIVERY
from streams.metrics import Metrics
from streams.runtime.commit import Runtime
from streams.runtime.pipeline import build_pipeline
from streams.runtime.records import FeatureRow, Out
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.serving import Serving, partition_key
from streams.settings import Settings
from tests.checkpoints import make_checkpoint
from tests.streams.runtime.stages.test_forecasts import START, Producer
from tests.streams.runtime.test_stores import MemoryChangelogs

SYMBOLS = ("6EH4", "ESU4", "NQU4", "ZNU4")  # two a partition, the partitions interleaved
NEEDED = 16  # scored canary forecasts over a partition's two symbols: a verdict ~18 minutes in
CANARY_AT, END = 62, 90  # minutes


def rows(minute: int) -> list[FeatureRow]:
    rng, ts = np.random.default_rng(minute), START + minute * NS_PER_MIN
    out = []
    for i, symbol in enumerate(SYMBOLS):
        close = 1.1 * float(np.exp(rng.normal(0.0, 1e-3)))
        offset = 2 * minute + i // 2  # each partition's own offsets
        values = rng.normal(size=N_FEATURES)
        row = (symbol.encode(), i % 2, offset, 0.0, None, symbol, ts, close, False, True)
        out.append(FeatureRow(*row, values, FINGERPRINT))
    return out


def stage(
    models: Path,
    max_batch: int = 256,
    changelogs: MemoryChangelogs | None = None,
    default: str = "serving",
) -> tuple[Forecasting, Producer]:
    """A forecast stage serving checkpoint `models/default`, its changelogs in memory."""
    settings = replace(Settings(), role="forecast", canary_forecasts=NEEDED, max_batch=max_batch)
    runtime = Runtime(settings, Metrics(), "t", lambda topic: {0, 1}, lambda: asyncio.sleep(0))
    producer = runtime.producer = Producer()  # type: ignore[assignment]
    runtime.changelogs = changelogs or MemoryChangelogs()  # type: ignore[assignment]
    engine = ForecastEngine.from_settings(models / default, settings)
    forecasting = build_pipeline(settings, runtime, engine).forecasting
    assert forecasting is not None and forecasting.serving.canaries
    return forecasting, producer


def published(producer: Producer, returned: list[Out]) -> dict[tuple[str, str, int], Any]:
    """What the stage sent, and what `add` returned for its caller to send."""
    out = {}
    for record in [*(r for call in producer.calls for r in call), *returned]:
        value = {k: v for k, v in orjson.loads(record.value).items() if k not in DELIVERY}
        out[record.topic, value["symbol"], value["ts_event"]] = value
    return out


def states(forecasting: Forecasting) -> list[PartitionCanary]:
    store = forecasting.serving.store
    assert store is not None
    return [store.read(partition_key(p)) for p in (0, 1)]


def test_a_burst_after_the_quiet_is_one_batch_and_the_verdict_is_the_same(
    tmp_path: Path,
) -> None:
    make_checkpoint(tmp_path / "serving")
    canary_id = make_checkpoint(tmp_path / "canary", seed=1)
    quiet, quiet_out = stage(tmp_path)
    busy, busy_out = stage(tmp_path)
    forecasts = quiet.settings.topic_forecasts
    returned: tuple[list[Out], list[Out]] = ([], [])

    async def run() -> None:
        for minute in range(END):
            if minute == CANARY_AT:
                for forecasting in (quiet, busy):
                    canary = ForecastEngine.from_settings(tmp_path / "canary", quiet.settings)
                    forecasting.serving.propose(canary)
            before = len(quiet_out.calls)
            returned[0].extend(await quiet.add(rows(minute)))
            await quiet.drain()  # the quiet after a minute's burst
            calls = quiet_out.calls[before:]
            batches = [c for c in calls if any(r.topic == forecasts for r in c)]
            assert len(batches) == (minute >= quiet.lookback - 1), minute
            # a replay's: the minutes before are still unscored at each minute's first row
            returned[1].extend(await busy.add(rows(minute)))
        await busy.drain()

    asyncio.run(run())
    decided = states(quiet)
    assert all(canary_id in s.verdicts for s in decided), "the canary was decided"
    # the checkpoint no partition serves any more is let go
    assert set(quiet.serving.engines) == {s.serving for s in decided}, quiet.serving.engines
    assert states(busy) == decided
    records = published(quiet_out, returned[0])
    assert any(topic == quiet.settings.topic_shadow for topic, *_ in records)
    assert published(busy_out, returned[1]) == records


def test_a_canarys_forecasts_wait_for_the_quiet_and_are_the_same_whenever_made(
    tmp_path: Path,
) -> None:
    """A burst's flush publishes the serving checkpoint's forecasts only; the canary's follow
    in the quiet's drain, and equal those of a stage that makes them a batch after each."""
    make_checkpoint(tmp_path / "serving")
    canary_id = make_checkpoint(tmp_path / "canary", seed=1)
    waiting, waiting_out = stage(tmp_path)
    eager, eager_out = stage(tmp_path, max_batch=2)
    eager.later.limit = 1  # each batch's canary forecasts are made before the next is scored
    shadow = waiting.settings.topic_shadow
    returned: tuple[list[Out], list[Out]] = ([], [])

    async def run() -> None:
        for minute in range(END):
            for i, (forecasting, out) in enumerate(((waiting, waiting_out), (eager, eager_out))):
                if minute == CANARY_AT:
                    canary = ForecastEngine.from_settings(tmp_path / "canary", waiting.settings)
                    forecasting.serving.propose(canary)
                returned[i].extend(await forecasting.add(rows(minute)))
                before = len(out.calls)
                await forecasting.flush()
                flushed = {r.topic for call in out.calls[before:] for r in call}
                if forecasting is waiting and minute >= waiting.lookback - 1:
                    assert flushed == {waiting.settings.topic_forecasts}, minute
                await forecasting.drain()
                assert not len(forecasting.later)

    asyncio.run(run())
    assert all(canary_id in s.verdicts for s in states(waiting)), "the canary was decided"
    assert states(eager) == states(waiting)
    records = published(waiting_out, returned[0])
    assert sum(topic == shadow for topic, *_ in records) > len(SYMBOLS) * 4
    assert published(eager_out, returned[1]) == records


def test_barcast_promote_loads_a_checkpoint_let_go_and_it_serves_from_the_next_row(
    tmp_path: Path,
) -> None:
    """Once decided, the checkpoint no partition serves is let go (its weights and caches
    would stay for as long as the worker runs); `barcast promote` loads it again."""
    serving_id = make_checkpoint(tmp_path / "serving")
    canary_id = make_checkpoint(tmp_path / "canary", seed=1)
    forecasting, producer = stage(tmp_path)
    watcher = CheckpointWatcher(tmp_path)
    forecasting.watch(watcher)
    watcher.accept(tmp_path / "canary")  # as the worker does on proposing it
    returned: list[Out] = []

    async def minutes(start: int, end: int) -> None:
        for minute in range(start, end):
            if minute == CANARY_AT:
                canary = ForecastEngine.from_settings(tmp_path / "canary", forecasting.settings)
                forecasting.serving.propose(canary)
            returned.extend(await forecasting.add(rows(minute)))
            await forecasting.drain()

    asyncio.run(minutes(0, END))
    decided = {s.serving for s in states(forecasting)}
    assert len(decided) == 1 and all(canary_id in s.verdicts for s in states(forecasting))
    (let_go,) = {serving_id, canary_id} - decided
    assert let_go not in forecasting.serving.engines

    (tmp_path / PROMOTE).write_text(let_go)
    asyncio.run(forecasting.reload(watcher))
    assert let_go in forecasting.serving.engines
    asyncio.run(minutes(END, END + 2))
    assert all(s.serving == let_go for s in states(forecasting))
    last = START + (END + 1) * NS_PER_MIN
    served = {
        v["model_id"]
        for (t, _, ts), v in published(producer, returned).items()
        if t == forecasting.settings.topic_forecasts and ts == last
    }
    assert served == {let_go}


def test_a_promote_of_a_checkpoint_not_in_the_directory_is_tried_again() -> None:
    """`barcast promote` names a checkpoint before it lands: the next promote loads it."""
    loads: list[str] = []

    async def load(model_id: str) -> ForecastEngine | None:
        loads.append(model_id)
        return None

    serving = Serving(None, Metrics(), 1)
    serving.load = load

    async def promote_twice() -> None:
        await serving.force("m")
        await serving.force("m")

    asyncio.run(promote_twice())
    assert loads == ["m", "m"] and serving.forced == set()


def test_a_checkpoint_of_another_horizon_is_not_proposed_as_a_canary(tmp_path: Path) -> None:
    """Its forecasts would be scored against the serving model's horizon by horizon, and the
    scoring stage would fail on the first of them, at every restart: it is refused, named."""
    make_checkpoint(tmp_path / "serving")
    forecasting, _ = stage(tmp_path)
    watcher = CheckpointWatcher(tmp_path)
    watcher.accept(tmp_path / "serving")
    longer = make_checkpoint(tmp_path / "longer", seed=1, horizon=12)
    asyncio.run(forecasting.reload(watcher))
    assert forecasting.serving.candidate is None and longer not in forecasting.serving.engines
    assert watcher.current == tmp_path / "serving"


def test_a_checkpoint_proposed_just_before_a_verdict_is_the_next_canary(tmp_path: Path) -> None:
    """A checkpoint lands in the quiet before the minute the running canary is decided at:
    the partitions take it up after that verdict, as a restarted worker would, not drop it."""
    make_checkpoint(tmp_path / "serving")
    first = make_checkpoint(tmp_path / "canary", seed=1)
    newer = make_checkpoint(tmp_path / "newer", seed=2)

    async def run(newer_at: int | None) -> tuple[int | None, Forecasting]:
        forecasting, _ = stage(tmp_path)
        decided_at = None
        for minute in range(END):
            for at, name in ((CANARY_AT, "canary"), (newer_at, "newer")):
                if minute == at:
                    engine = ForecastEngine.from_settings(tmp_path / name, forecasting.settings)
                    forecasting.serving.propose(engine)
            await forecasting.add(rows(minute))
            await forecasting.drain()
            if decided_at is None and all(first in s.verdicts for s in states(forecasting)):
                decided_at = minute
        return decided_at, forecasting

    decided_at, _ = asyncio.run(run(None))
    assert decided_at is not None
    _, forecasting = asyncio.run(run(decided_at))
    assert all(s.candidate == newer for s in states(forecasting))
    assert newer in forecasting.serving.engines
