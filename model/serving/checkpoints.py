"""Which checkpoint the forecast worker serves: the newest complete one in the model directory.

`BARCAST_MODEL_DIR` is either one checkpoint (it holds `config.json`) or a directory of them;
`barcast train` writes `config.json` last and atomically, so a directory with one is complete.
Rolling out a model = copying a new checkpoint directory in; rolling back = removing it.
`barcast promote` writes PROMOTE there: the model id a worker is to serve without a canary's
verdict (model.serving.canary).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from model.checkpoint import CONFIG, WEIGHTS, CheckpointError
from model.serving.scoring import check_quantiles

if TYPE_CHECKING:
    from model.serving.forecast_engine import ForecastEngine, Served, ServingSettings


PROMOTE = "PROMOTE"


class CheckpointWatcher:
    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.current: Path | None = None
        self._rejected: dict[Path, tuple[int, int, int]] = {}

    def newest(self) -> Path | None:
        """The complete checkpoint whose config.json is newest; one removed while this looks
        (a rollback) is not one."""
        candidates = []
        for d in self.checkpoints():
            try:
                candidates.append(((d / CONFIG).stat().st_mtime_ns, d.name, d))
            except FileNotFoundError:  # removed since it was listed
                continue
        return max(candidates)[2] if candidates else None

    def find(self, model_id: str) -> Path | None:
        """The complete checkpoint of `model_id` (its weights' hash, as config.json records
        it) in the model directory, or None."""
        return next((p for p in self.checkpoints() if model_id_of(p) == model_id), None)

    def checkpoints(self) -> list[Path]:
        """Every complete checkpoint in the model directory (the directory itself if it is one)."""
        if (self.model_dir / CONFIG).is_file():
            return [self.model_dir]
        try:
            entries = sorted(self.model_dir.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [d for d in entries if (d / CONFIG).is_file() and (d / WEIGHTS).is_file()]

    def promoted(self) -> str | None:
        """The model id `barcast promote` wrote, if any."""
        try:
            return (self.model_dir / PROMOTE).read_text().strip() or None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def poll(self) -> Path | None:
        """A checkpoint newer than the one served that has not failed validation, or None."""
        newest = self.newest()
        if newest is None or newest == self.current:
            return None
        signature = _signature(newest)
        if signature is None or self._rejected.get(newest) == signature:
            return None  # removed since, or refused and unchanged since
        return newest

    def accept(self, path: Path) -> None:
        self.current = path

    def reject(self, path: Path) -> None:
        """Remember a checkpoint that failed validation until its files change again (one
        caught half-copied is retried once the copy completes; one removed is forgotten)."""
        signature = _signature(path)
        if signature is None:
            self._rejected.pop(path, None)
        else:
            self._rejected[path] = signature


def model_id_of(path: Path) -> str | None:
    """The model id a checkpoint's config.json records (its weights' hash), None if unread."""
    try:
        return str(json.loads((path / CONFIG).read_text())["weights"]["sha256"])[:16]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when a checkpoint's files are copied again; None once they are gone."""
    try:
        config, weights = (path / CONFIG).stat(), (path / WEIGHTS).stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return config.st_mtime_ns, weights.st_mtime_ns, weights.st_size


def load_engine(
    path: Path,
    settings: ServingSettings,
    engine: ForecastEngine | None,
    lookback: int | None,
    horizon: int | None = None,
) -> tuple[ForecastEngine, Served]:
    """The checkpoint at `path` validated and on the device (blocking), with the engine to
    swap it into (`engine`, or a new one); one of another lookback than the worker's windows
    (`lookback`, None before any), of other quantiles than it publishes, or of another horizon
    than the model it would forecast beside (`horizon`: a canary's forecasts are scored
    against the serving model's, horizon by horizon), refused: CheckpointError."""
    from model.serving.forecast_engine import ForecastEngine

    if engine is None:
        engine = ForecastEngine.from_settings(path, settings)
        served = engine.served
    else:
        served = engine.prepare(path)
    check_quantiles(path, served.forecaster.config.quantiles)
    served_lookback = served.forecaster.config.lookback
    if lookback is not None and served_lookback != lookback:
        raise CheckpointError(
            f"it looks back {served_lookback} bars and this worker's windows hold {lookback}: "
            "restart the worker to serve it"
        )
    served_horizon = served.forecaster.config.horizon
    if horizon is not None and served_horizon != horizon:
        raise CheckpointError(
            f"it forecasts {served_horizon} minutes ahead and the model serving {horizon}: a "
            "canary is scored against the model horizon by horizon; serve it with "
            "BARCAST_CANARY=off (swapped in at once)"
        )
    return engine, served
