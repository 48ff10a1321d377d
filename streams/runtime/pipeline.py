"""A worker role's stages and their stores, Faust-free: the one wiring that the agents
(streams.agents), the memory probe (benchmarks/memory_probe/worker.py) and the tests run.

Role `all` chains corrections, features and forecasting in one agent; `stream` runs
corrections and features, `forecast` forecasting (with scoring), `corrections` that stage
alone, each behind its topic; `passthrough` has no stage (it copies raw bars untouched)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from features.corrections import CorrectionConfig, SymbolState
from features.engine import FINGERPRINT, N_FEATURES
from model.config import TFTConfig
from model.covariates import NS_PER_DAY
from model.serving.canary import PartitionCanary
from model.serving.conformal import CalibrationConfig, SymbolCalibration
from model.serving.scoring_state import SymbolScoring
from model.serving.skill import ServeMode
from streams.runtime.changelog import Changelog
from streams.runtime.stages.corrections import Corrections
from streams.runtime.stages.features import Features, SymbolFeatures
from streams.runtime.stages.forecasts import Forecasting
from streams.runtime.stages.scores import Scoring
from streams.runtime.stages.serving import Serving
from streams.runtime.stores import (
    ShadowStore,
    StateStore,
    Store,
    StoreName,
    StreamStore,
    WindowStore,
)

if TYPE_CHECKING:
    from model.serving.forecast_engine import ForecastEngine
    from streams.runtime.commit import Runtime
    from streams.settings import Settings

STAGES = {
    "passthrough": (),
    "corrections": ("corrections",),
    "stream": ("corrections", "features"),
    "forecast": ("forecasting",),
    "all": ("corrections", "features", "forecasting"),
}


@dataclass
class Pipeline:
    """The stages of a role (None: not run by it)."""

    corrections: Corrections | None = None
    features: Features | None = None
    forecasting: Forecasting | None = None

    @property
    def stores(self) -> list[Store]:
        """Every stage's stores, in the order of the stages."""
        stores: list[Store] = []
        if self.corrections is not None:
            stores.append(self.corrections.store)
        if self.features is not None:
            stores.append(self.features.store)
        if self.forecasting is not None:
            stores += self.forecasting.stores
        return stores


def build_pipeline(
    settings: Settings, runtime: Runtime, engine: ForecastEngine | None = None
) -> Pipeline:
    """The stages of `settings.role`, each store in `runtime`'s changelog of its StoreName;
    forecasting serves `engine` (None: none yet, its windows sized for the default lookback)."""
    stages = STAGES[settings.role]
    changelog = runtime.changelog
    pipeline = Pipeline()
    if "corrections" in stages:
        topics = (settings.topic_raw, settings.topic_clean, settings.topic_dlq)
        config = CorrectionConfig(fill_gaps=settings.fill_gaps)
        store = state_store(changelog, StoreName.CORRECTIONS, SymbolState)
        expire_ns = round(settings.expire_days * NS_PER_DAY)
        pipeline.corrections = Corrections(store, config, topics, expire_ns)
    if "features" in stages:
        store = state_store(changelog, StoreName.FEATURES, SymbolFeatures)
        pipeline.features = Features(store, settings.topic_features, settings.topic_dlq)
    if "forecasting" in stages:
        lookback = TFTConfig.lookback if engine is None else engine.lookback
        windows = WindowStore(
            changelog(StoreName.FORECAST_WINDOWS), lookback, N_FEATURES, FINGERPRINT
        )
        scoring = build_scoring(settings, changelog)
        serving = build_serving(settings, runtime, engine, scoring)
        streams = StreamStore(changelog(StoreName.STREAMS))
        pipeline.forecasting = Forecasting(runtime, serving, windows, scoring, streams)
    return pipeline


def build_serving(
    settings: Settings, runtime: Runtime, engine: ForecastEngine | None, scoring: Scoring
) -> Serving:
    """Which checkpoint serves each partition: with BARCAST_CANARY a canary store of its own
    (the canaries are scored in the shadow store); else `engine`, swapped as new ones land."""
    needed, metrics = settings.canary_forecasts, runtime.metrics
    if not (settings.canary and scoring.shadows is not None):
        return Serving(engine, metrics, needed)
    store = state_store(runtime.changelog, StoreName.CANARY, PartitionCanary)
    return Serving(engine, metrics, needed, store, scoring.shadows, scoring.calibrations)


def build_scoring(settings: Settings, changelog: Callable[[str], Changelog]) -> Scoring:
    window = settings.score_window
    decode, new = SymbolScoring.decoder(window), lambda: SymbolScoring(window)
    scores = state_store(changelog, StoreName.SCORING, SymbolScoring, decode, new)
    calibrations = state_store(changelog, StoreName.CALIBRATION, SymbolCalibration)
    calibration = CalibrationConfig(enabled=settings.online_calibration)
    shadows = (
        ShadowStore(changelog(StoreName.SHADOW), window) if settings.shadow_baselines else None
    )
    return Scoring(
        scores, calibrations, calibration, settings.topic_scores, settings.online_scoring,
        shadows, ServeMode(settings.serve),
    )  # fmt: skip


def state_store(
    changelog: Callable[[str], Changelog],
    name: StoreName,
    kind: Any,
    decode: Any = None,
    new: Any = None,
) -> StateStore:
    """A `StateStore` in changelog `name` of `kind`'s states, coded as `kind` codes them."""
    return StateStore(changelog(name), decode or kind.from_bytes, kind.to_bytes, new or kind)
