"""The forecast stage's shadow baselines without a broker (streams.runtime.stages.scores with a
shadow store): whatever the micro-batches, what it publishes equals `served_history`, and a
restore as of a checkpoint replays the same bytes, the serve choice and the baselines' EWMAs,
calibrations and skill windows included."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pandas as pd
import pytest

from features import engine as feature_engine
from features.bars import PRICE_SCALE
from features.corrections import bars_from_frame
from model.serving.forecast_engine import ForecastEngine, WindowRequest
from model.serving.messages import forecast_value
from model.serving.offline import DELIVERY, clean_history, served_history
from model.serving.shadow import columns_of
from model.serving.skill import ServeMode
from streams.runtime.changelog import Changelog
from streams.runtime.pipeline import build_scoring
from streams.runtime.records import FeatureRow
from streams.runtime.stages.scores import Scores, Scoring
from streams.runtime.stages.windows import slide
from streams.runtime.stores import WindowStore
from streams.settings import Settings
from tests.checkpoints import make_checkpoint, torch_threads_of_a_worker
from tests.streams.runtime.test_stores import MemoryChangelogs, flush

pytestmark = pytest.mark.usefixtures("worker_threads")  # one torch thread on two cores
SYMBOLS = ("6EH4", "6EM4")
BARS = 1200


@pytest.fixture(scope="module")
def history(sixe_bars: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two symbols' bars, a random-weight checkpoint (the baselines beat it) and what the
    worker publishes for them, computed in one process."""
    values = [
        v
        for i, symbol in enumerate(SYMBOLS)
        for v in bars_from_frame(sixe_bars.iloc[i * 500 : i * 500 + BARS], symbol=symbol)
    ]
    directory = tmp_path_factory.mktemp("shadow") / "ck"
    make_checkpoint(directory)
    engine = ForecastEngine(directory)
    # A module's fixture is set up before the tests' `worker_threads`: the worker's threads
    # here too, or a machine whose torch defaults to more rounds these forecasts otherwise.
    with torch_threads_of_a_worker():
        published, scores = served_history(values, engine, mode=ServeMode.AUTO, window=100)
    return values, directory, published, scores


class Stage:
    """The scoring stage with its stores and a window store, fed rows as the forecast stage
    feeds them, its forecasts made `batch` windows at a time."""

    def __init__(
        self,
        io: MemoryChangelogs,
        engine: ForecastEngine,
        batch: int,
        shadows: bool = True,
        settle_every: int = 1,  # batches between two settles (checkpoints, in a worker)
    ) -> None:
        settings = Settings(score_window=100, shadow_baselines=shadows)
        changelog = lambda name: Changelog(f"t-{name}", io)  # noqa: E731
        self.scoring: Scoring = build_scoring(settings, changelog)
        self.windows = WindowStore(
            changelog("windows"), engine.lookback, feature_engine.N_FEATURES,
            feature_engine.FINGERPRINT,
        )  # fmt: skip
        self.engine, self.batch, self.settle_every = engine, batch, settle_every
        self.waiting: list[WindowRequest] = []
        self.flushes = 0

    @property
    def stores(self) -> list[Any]:
        return [self.windows, *self.scoring.stores]

    def rows(self, rows: list[FeatureRow]) -> Iterator[tuple[str, dict[str, Any]]]:
        for row in rows:
            request = slide(self.windows, row, True)
            self.scoring.bar(row, request, self.engine)
            if request is not None:
                self.waiting.append(request)
            if len(self.waiting) >= self.batch:
                yield from self.flush(settle=False)

    def flush(self, settle: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
        batch, self.waiting, out = self.waiting, [], Scores()
        self.flushes += 1
        if batch:
            quantiles = self.engine.predict(batch)
            values = [
                forecast_value(self.engine, r, quantiles[i], 0, 0) for i, r in enumerate(batch)
            ]
            shadows = self.scoring.shadows is not None
            baselines = columns_of(self.engine.shadow(batch)) if shadows else None
            for value in self.scoring.forecasts(batch, values, baselines, out):
                yield "forecast", {k: v for k, v in value.items() if k not in DELIVERY}
        if settle or self.flushes % self.settle_every == 0:
            self.scoring.settle(out)
        for record in out.values:
            yield "score", orjson.loads(orjson.dumps(record))


def feature_rows(values: list[dict[str, Any]]) -> list[FeatureRow]:
    """Every clean bar's feature row, the symbols interleaved by time, one offset each."""
    rows = []
    for symbol, clean in clean_history(values).items():
        features, warm = feature_engine.compute_batch(*clean.columns())
        for bar, row, ready in zip(clean.bars, features, warm, strict=True):
            ts, close = int(bar["ts_event"]), bar["close"] * PRICE_SCALE
            synthetic, fingerprint = bar["status"] == "synthetic", feature_engine.FINGERPRINT
            head = (symbol.encode(), 0, 0, 0.0, 0, symbol, ts, close, synthetic)
            rows.append(FeatureRow(*head, bool(ready), row, fingerprint))
    rows.sort(key=lambda r: (r.ts_event, r.symbol))
    for offset, row in enumerate(rows):
        row.offset = offset
    return rows


def by_key(outputs: list[tuple[str, dict[str, Any]]]) -> dict[tuple[str, str, int], bytes]:
    """De-duplicated by kind, symbol and ts_event; a repeat must repeat every byte."""
    out: dict[tuple[str, str, int], bytes] = {}
    for kind, value in outputs:
        key, data = (kind, value["symbol"], value["ts_event"]), orjson.dumps(value)
        assert out.setdefault(key, data) == data, f"{key} changed on a replay"
    return out


def expected(history: Any) -> dict[tuple[str, str, int], bytes]:
    _, _, published, scores = history
    return by_key([("forecast", v) for v in published] + [("score", s) for s in scores.values()])


# Batches of 5 cut the history across symbols and minutes at other places than the worker's did
# (a forecast alone in its batch is the serving engine's own test). Settles far apart leave
# baselines uncalibrated across the next rows and batches, as a replay at full speed does.
@pytest.mark.parametrize(("batch", "settle_every"), [(5, 1), (64, 1), (5, 9)])
def test_what_the_stage_publishes_is_served_history(
    history: Any, batch: int, settle_every: int
) -> None:
    values, directory, published, _ = history
    stage = Stage(MemoryChangelogs(), ForecastEngine(directory), batch, settle_every=settle_every)
    rows = feature_rows(values)
    outputs = [*stage.rows(rows), *stage.flush()]
    assert by_key(outputs) == expected(history)
    sources = {v["source"] for v in published}
    assert sources == {"model", "volatility_scale", "tod_ewma"}, sources


def test_a_restore_as_of_a_checkpoint_replays_the_same_bytes(history: Any) -> None:
    values, directory, _, _ = history
    rows, io, engine = feature_rows(values), MemoryChangelogs(), ForecastEngine(directory)
    stage = Stage(io, engine, 64)
    boundary = 1400
    outputs = [*stage.rows(rows[:boundary]), *stage.flush()]  # a checkpoint drains, then stores

    async def crash_and_restore() -> Stage:
        await asyncio.gather(*(flush(store) for store in stage.stores))
        outputs.extend(stage.rows(rows[boundary : boundary + 400]))
        await asyncio.gather(*(flush(store) for store in stage.stores))  # never marked
        restored = Stage(io, ForecastEngine(directory), 64)
        for store in restored.stores:
            await store.restore(0, boundary)
        return restored

    restored = asyncio.run(crash_and_restore())
    outputs += [*restored.rows(rows[boundary:]), *restored.flush()]
    assert by_key(outputs) == expected(history)


def test_a_worker_restarted_from_state_stored_without_shadow_baselines_goes_on(
    history: Any,
) -> None:
    """A worker of a barcast before them stored no shadow state: its forecasts still waiting
    are scored without baselines, and every forecast after the restart with them."""
    values, directory, _, _ = history
    rows, io, engine = feature_rows(values), MemoryChangelogs(), ForecastEngine(directory)
    before = Stage(io, engine, 64, shadows=False)
    boundary = 1400
    outputs = [*before.rows(rows[:boundary]), *before.flush()]

    async def restore() -> Stage:
        await asyncio.gather(*(flush(store) for store in before.stores))
        restored = Stage(io, ForecastEngine(directory), 64)
        for store in restored.stores:
            await store.restore(0, boundary)
        return restored

    restored = asyncio.run(restore())
    after = [*restored.rows(rows[boundary:]), *restored.flush()]
    scores = [v for kind, v in after if kind == "score" and v["unscored"] is None]
    old = [s for s in scores if s["ts_event"] < rows[boundary].ts_event]
    assert old and all(set(s["baselines"].values()) == {None} for s in old)
    new = [s for s in scores if s["ts_event"] > rows[boundary].ts_event + 11 * 60 * 10**9]
    assert len(new) > 500 and all(s["baselines"]["volatility_scale"] for s in new)
    assert all(kind != "forecast" or "source" in v for kind, v in outputs + after)


def test_baselines_are_calibrated_after_the_forecast_they_shadow_is_published(
    history: Any,
) -> None:
    """The model's own published forecast does not wait for its baselines' calibration: they
    are calibrated by the next settle (or the symbol's next row), as `served_history` does at
    once."""
    values, directory, _, _ = history
    stage = Stage(MemoryChangelogs(), ForecastEngine(directory), 64)
    rows = feature_rows(values)
    last = {row.symbol: row for row in rows}  # each symbol's last minute
    list(stage.rows([row for row in rows if last[row.symbol] is not row]))
    list(stage.flush())
    list(stage.rows(list(last.values())))
    batch, stage.waiting = stage.waiting, []
    quantiles = stage.engine.predict(batch)
    values_ = [forecast_value(stage.engine, r, quantiles[i], 0, 0) for i, r in enumerate(batch)]
    baselines = columns_of(stage.engine.shadow(batch))
    published = stage.scoring.forecasts(batch, values_, baselines, Scores())
    left = [e for entries in stage.scoring.uncalibrated.values() for e in entries]
    served = [v for v in published if v["source"] == "model"]
    assert len(batch) == 2 and served and len(left) == len(served)
    assert all(pending.quantiles == {} for _, _, pending, _ in left)
    stage.scoring.settle(Scores())
    assert not stage.scoring.uncalibrated
    assert all(set(pending.quantiles) == set(raw) and raw for _, _, pending, raw in left)
