"""Inference for the forecast worker: load a checkpoint once, forecast batches of windows.

Device choice: CUDA with bf16 autocast when a GPU is used, else CPU in fp32 (no INT8: dynamic
quantization does not beat fp32 on this model). `encode` +
`predict_encoded` split the forward pass so the worker can cache each bar's encoding (it depends
only on that bar's features and the symbol) and encode only the newest bar of a sliding window.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model import checkpoint
from model.releases import known_future, release_calendar
from model.tft import StaticContext, TemporalFusionTransformer, TFTOutput


@dataclass(frozen=True)
class ForecastBatch:
    """Windows to forecast; row i is symbol[i]'s window ending at the bar ts_event[i]."""

    symbols: list[str]
    ts_event: np.ndarray  # (B,) int64 UTC ns, open time of each window's last bar
    close: np.ndarray  # (B,) close of that bar (price quantiles are relative to it)
    features: np.ndarray  # (B, lookback, n_hist) raw feature rows, oldest first (the model's
    # inputs in `predict`; the volatility scale's in both `predict` and `predict_encoded`)


@dataclass(frozen=True)
class Forecast:
    quantiles: np.ndarray  # (B, horizon, n_quantiles) cumulative log returns of the close
    prices: np.ndarray  # (B, horizon, n_quantiles) close * exp(quantiles)
    explain: TFTOutput | None = None  # attention and selection weights, when asked for


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but no CUDA GPU is visible; set BARCAST_DEVICE=cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}; use auto, cpu or cuda")
    return torch.device(device)


def autocast_for(device: torch.device) -> torch.autocast:
    """bf16 autocast on CUDA; a no-op context on CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


class Forecaster:
    """One checkpoint, loaded once, on one device. Not thread-safe: one inference thread."""

    def __init__(
        self,
        directory: Path,
        *,
        device: str = "auto",
        expected_fingerprint: str | None = None,
    ) -> None:
        model, meta, model_id = checkpoint.load(Path(directory), expected_fingerprint)
        self.meta, self.model_id = meta, model_id
        self.config = meta.config
        self.device = resolve_device(device)
        self.precision = "bf16" if self.device.type == "cuda" else "fp32"
        self.model: TemporalFusionTransformer = model.to(self.device).eval()
        self.calendar = release_calendar(self.config.releases)  # what it was trained with
        self._statics: dict[str, tuple[int, np.ndarray]] = {}

    @property
    def fingerprint(self) -> str:
        return self.meta.feature_fingerprint

    @property
    def name(self) -> str:
        return f"{self.device.type}-{self.precision}"

    @torch.inference_mode()
    def predict(self, batch: ForecastBatch, explain: bool = False) -> Forecast:
        """Forecast full windows of raw feature rows."""
        features = self._check_window(batch.features, self.config.lookback)
        with autocast_for(self.device):
            static = self._static(batch.symbols)
            encoded, hist_weights = self.model.encode_history(features, static.selection)
            out = self.model.forward_encoded(encoded, static, self._future(batch.ts_event))
        return self._forecast(batch, out._replace(hist_weights=hist_weights), explain)

    @torch.inference_mode()
    def encode(self, symbols: list[str], features: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Encodings `(B, T, hidden)` of raw feature rows `(B, T, n_hist)`, any T (1 for the
        newest bar), and their variable-selection weights `(B, T, n_hist)`; row i uses
        symbol[i]'s static context. Both stay on the model's device, in float32."""
        x = self._check_window(features, None)
        with autocast_for(self.device):
            static = self._static(symbols)
            encoded, weights = self.model.encode_history(x, static.selection)
        return encoded.float(), weights.float()

    @torch.inference_mode()
    def predict_encoded(
        self, batch: ForecastBatch, encoded: torch.Tensor, explain: bool = False
    ) -> Forecast:
        """Forecast from cached encodings `(B, lookback, hidden)` (from `encode`)."""
        if encoded.shape[1] != self.config.lookback:
            raise ValueError(
                f"encoded windows hold {encoded.shape[1]} steps; the model needs "
                f"lookback={self.config.lookback}"
            )
        with autocast_for(self.device):
            static = self._static(batch.symbols)
            out = self.model.forward_encoded(
                encoded.to(self.device), static, self._future(batch.ts_event)
            )
        return self._forecast(batch, out, explain)

    def _forecast(self, batch: ForecastBatch, out: TFTOutput, explain: bool) -> Forecast:
        outputs = out.quantiles.float().cpu().numpy().astype(np.float64)
        inputs = batch.features[:, :, list(self.meta.volatility.columns)]
        quantiles = self.meta.to_returns(outputs, batch.ts_event, inputs)
        close = np.asarray(batch.close, dtype=np.float64)[:, None, None]
        return Forecast(quantiles, close * np.exp(quantiles), out if explain else None)

    def _check_window(self, features: np.ndarray, steps: int | None) -> torch.Tensor:
        n_hist = self.config.n_hist
        if (
            features.ndim != 3
            or features.shape[2] != n_hist
            or (steps is not None and features.shape[1] != steps)
        ):
            raise ValueError(
                f"features have shape {features.shape}; expected (batch, "
                f"{steps or 'steps'}, {n_hist}) raw feature-engine rows"
            )
        x = self.meta.normalizer.apply(features)
        return torch.from_numpy(x).to(self.device)

    def _static(self, symbols: list[str]) -> StaticContext:
        for s in symbols:
            if s not in self._statics:
                ids, reals = self.meta.vocab.encode([s])
                self._statics[s] = (int(ids[0]), reals[0])
        ids = torch.tensor([self._statics[s][0] for s in symbols], device=self.device)
        reals = torch.from_numpy(np.stack([self._statics[s][1] for s in symbols]))
        return self.model.static_context(ids, reals.to(self.device))

    def _future(self, ts_event: np.ndarray) -> torch.Tensor:
        ts = np.asarray(ts_event, dtype=np.int64)
        future = known_future(ts, self.config.horizon, self.calendar)
        return torch.from_numpy(future).to(self.device)
