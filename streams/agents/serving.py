"""Which model the forecast stage serves: the newest checkpoint at start, none while the model
directory holds none (windows fill meanwhile), and each new checkpoint, loaded off the loop."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from model.checkpoint import CheckpointError
from streams.forecast.checkpoints import CheckpointWatcher
from streams.forecast.engine import ForecastEngine, Served
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.faust_app import BarcastApp

log = logging.getLogger("barcast.forecast")


def initial_engine(app: BarcastApp, watcher: CheckpointWatcher) -> ForecastEngine | None:
    """The newest checkpoint's engine, or None (said once) while the directory holds none."""
    path = watcher.newest()
    if path is None:

        @app.task
        async def waiting() -> None:  # a task: it logs once the worker's logging is set up
            log.warning(
                "no checkpoint in %s (BARCAST_MODEL_DIR) yet: waiting for one; corrections and "
                "features run meanwhile, and bars are forecast once one lands (train one with "
                "`barcast train --data FILE --out %s/NAME`)",
                watcher.model_dir,
                watcher.model_dir,
            )

        return None
    try:
        engine = ForecastEngine.from_settings(path, app.barcast)
    except CheckpointError as exc:
        # Serving a model trained on other features is never right: refuse to start, with
        # the reason on one line instead of a traceback.
        raise SystemExit(f"barcast forecast worker: {exc}") from None
    watcher.accept(path)
    app.metrics.set_model(engine.model_id, engine.fingerprint)
    log.info("serving checkpoint %s on %s", engine.model_id, engine.device)
    return engine


def load(
    path: Path, engine: ForecastEngine | None, settings: Settings, lookback: int
) -> tuple[ForecastEngine, Served]:
    """The checkpoint at `path` validated and on the device (blocking: run it in a thread),
    with the engine to swap it into: the current one, or a new one for the first checkpoint.
    One that looks back another number of bars than the windows hold is refused."""
    if engine is None:
        engine = ForecastEngine.from_settings(path, settings)
        served = engine.served
    else:
        served = engine.prepare(path)
    if served.forecaster.config.lookback != lookback:
        raise CheckpointError(
            f"it looks back {served.forecaster.config.lookback} bars and this worker's windows "
            f"hold {lookback}: restart the worker to serve it"
        )
    return engine, served
