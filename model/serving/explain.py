"""Per-forecast explanations (`BARCAST_EXPLAIN=true`), the `forecasts.explain` topic's value.

`barcast evaluate` (model.explain) explains a model over many windows; this explains each
forecast from the very forward pass that made it (`ForecastEngine.predict_explained`): the
historical features the variable selection weighted most over the window, the static and
known-future weights, and where the attention looked. Pure: numpy in, plain data out
(`reduced` first makes the forward pass's tensors those few numbers per forecast).

Fields of an explanation (weights rounded to 5 decimals, entropies to 4):
- `historical`: the top k historical features by variable-selection weight averaged over the
  window's lookback bars, heaviest first: `{"feature": name, "weight": w}` each.
- `historical_top_k`: the sum of those k weights (each bar's weights sum to 1 over all
  features), so a reader sees how much of the selection the named features hold.
- `static`: static variable-selection weight per static variable (sum 1).
- `future`: known-future variable-selection weight per calendar variable, averaged over the
  horizon (sum 1).
- `attention`: where the attention looked, over the lookback bars and the horizon's decoder
  steps. `entropy`: nats of each head's weights, mean over heads and horizons (0 = every query
  on one position; `barcast evaluate`'s attention entropy, model.metrics.attention_entropy,
  for one forecast); `entropy_by_horizon`: the same per horizon 1..H. Then of the heads' mean
  weights (the interpretable attention: the mean is what multiplies the shared values), mean
  over horizons: `last_5` / `last_15`, the mass on the window's last 5 / last 15 bars (the 15
  include the 5), `older` on the bars before those 15, `future` on the horizon's own steps
  (`last_15 + older + future` = 1), and `top_lags`, the TOP_LAGS bars with the most mass:
  `{"lag": n, "weight": w}`, heaviest first, lag 0 = the forecast's bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from features.registry import FEATURE_NAMES
from model.covariates import FUTURE_NAMES, STATIC_NAMES

if TYPE_CHECKING:  # tensors come in from the engine; this module imports no torch
    from torch import Tensor

SCHEMA_VERSION = 1
WEIGHT_DIGITS, ENTROPY_DIGITS = 5, 4
RECENT = (5, 15)  # the `last_5` and `last_15` bars
TOP_LAGS = 3


@dataclass(frozen=True)
class ExplainArrays:
    """A micro-batch's explanation inputs, reduced on the model's device, as float64."""

    hist: np.ndarray  # (B, n_hist) selection weights, mean over the lookback
    static: np.ndarray  # (B, n_static)
    future: np.ndarray  # (B, n_future) selection weights, mean over the horizon
    entropy: np.ndarray  # (B, horizon) attention entropy (nats), mean over heads
    attention: np.ndarray  # (B, lookback + horizon) head-mean weights, mean over the horizon


def reduced(hist: Tensor, static: Tensor, attention: Tensor, future: Tensor) -> ExplainArrays:
    """Explanation inputs reduced on the model's device, so that only a few numbers per
    forecast cross to the host: hist (B, lookback, n_hist), static (B, n_static), attention
    (B, heads, horizon, lookback + horizon), future (B, horizon, n_future)."""
    attention = attention.float()
    # model.metrics.attention_entropy per head and horizon: masked positions hold 0
    entropy = -(attention * attention.clamp(1e-12, 1.0).log()).sum(-1).mean(1)
    parts = (
        hist.float().mean(1),
        static.float(),
        future.float().mean(1),
        entropy,
        attention.mean((1, 2)),
    )
    return ExplainArrays(*(p.cpu().numpy().astype(np.float64) for p in parts))


def _named(names: Sequence[str], weights: np.ndarray, what: str) -> list[str]:
    if len(names) != weights.shape[1]:
        raise ValueError(
            f"the model has {weights.shape[1]} {what} variables and barcast names "
            f"{len(names)}: serve a checkpoint trained on this barcast's feature set"
        )
    return list(names)


def _weights(names: list[str], rows: np.ndarray) -> list[dict[str, float]]:
    return [dict(zip(names, row, strict=True)) for row in np.round(rows, WEIGHT_DIGITS).tolist()]


def _heaviest(weights: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's k largest weights, largest first (ties: lower index
    first), without sorting whole rows: a partial partition, then a sort of the k."""
    if k < weights.shape[1]:
        part = np.sort(np.argpartition(-weights, k - 1, axis=1)[:, :k], axis=1)
    else:
        part = np.broadcast_to(np.arange(weights.shape[1]), weights.shape)
    ranked = np.argsort(-np.take_along_axis(weights, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, ranked, axis=1)


def _historical(
    hist: np.ndarray, top_k: int, names: Sequence[str]
) -> tuple[list[list[dict[str, Any]]], list[float]]:
    """Each row's top k features (heaviest first, ties by feature order) and their sum."""
    names = _named(names, hist, "historical")
    order = _heaviest(hist, max(1, min(top_k, hist.shape[1])))
    top = np.take_along_axis(hist, order, axis=1)
    rounded = np.round(top, WEIGHT_DIGITS).tolist()
    features = [
        [{"feature": names[j], "weight": w} for j, w in zip(row, ws, strict=True)]
        for row, ws in zip(order.tolist(), rounded, strict=True)
    ]
    return features, np.round(top.sum(1), WEIGHT_DIGITS).tolist()


def _attention(entropy: np.ndarray, attention: np.ndarray) -> list[dict[str, Any]]:
    lookback = attention.shape[1] - entropy.shape[1]
    past = attention[:, :lookback][:, ::-1]  # column n: lag n, the forecast's bar at lag 0
    masses = {
        "last_5": past[:, : RECENT[0]].sum(1),
        "last_15": past[:, : RECENT[1]].sum(1),
        "older": past[:, RECENT[1] :].sum(1),
        "future": attention[:, lookback:].sum(1),
    }
    rounded = {name: np.round(m, WEIGHT_DIGITS).tolist() for name, m in masses.items()}
    lags = _heaviest(past, min(TOP_LAGS, lookback))
    lag_weights = np.round(np.take_along_axis(past, lags, axis=1), WEIGHT_DIGITS).tolist()
    pooled = np.round(entropy.mean(1), ENTROPY_DIGITS).tolist()
    by_horizon = np.round(entropy, ENTROPY_DIGITS).tolist()
    return [
        {
            "entropy": pooled[i],
            "entropy_by_horizon": by_horizon[i],
            **{name: values[i] for name, values in rounded.items()},
            "top_lags": [
                {"lag": lag, "weight": w}
                for lag, w in zip(lags[i].tolist(), lag_weights[i], strict=True)
            ],
        }
        for i in range(len(pooled))
    ]


def explanations(
    arrays: ExplainArrays,
    top_k: int,
    hist_names: Sequence[str] = FEATURE_NAMES,
    static_names: Sequence[str] = STATIC_NAMES,
    future_names: Sequence[str] = FUTURE_NAMES,
) -> list[dict[str, Any]]:
    """One explanation per row of `arrays` (the fields are the module docstring's)."""
    features, covered = _historical(arrays.hist, top_k, hist_names)
    static = _weights(_named(static_names, arrays.static, "static"), arrays.static)
    future = _weights(_named(future_names, arrays.future, "known-future"), arrays.future)
    attention = _attention(arrays.entropy, arrays.attention)
    return [
        {
            "historical": features[i],
            "historical_top_k": covered[i],
            "static": static[i],
            "future": future[i],
            "attention": attention[i],
        }
        for i in range(len(features))
    ]
