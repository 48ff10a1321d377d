"""The model benchmark's anchors: pytorch-forecasting's TFT at barcast's sizes and inputs
(benchmarks/model/run.py says how the two architectures differ), and its inputs."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from model.config import TFTConfig


def require_ptf() -> None:
    try:
        import pytorch_forecasting  # noqa: F401
    except ImportError:
        raise SystemExit(
            "benchmarks/model/run.py compares against pytorch-forecasting, which is not installed: "
            "run `make bench-deps` first"
        ) from None


def ptf_model(config: TFTConfig, hidden_continuous_size: int | None = None) -> torch.nn.Module:
    """pytorch-forecasting's TFT with barcast's sizes and inputs; `hidden_continuous_size`
    defaults to barcast's `var_dim`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pytorch_forecasting import TemporalFusionTransformer as PtfTFT
        from pytorch_forecasting.metrics import QuantileLoss

        reals = _ptf_reals(config)
        return PtfTFT(
            hidden_size=config.hidden,
            lstm_layers=config.lstm_layers,
            attention_head_size=config.heads,
            dropout=config.dropout,
            output_size=len(config.quantiles),
            loss=QuantileLoss(list(config.quantiles)),
            max_encoder_length=config.lookback,
            static_categoricals=["symbol"],
            static_reals=reals["static"],
            time_varying_reals_encoder=reals["hist"],
            time_varying_reals_decoder=reals["future"],
            x_reals=reals["static"] + reals["hist"] + reals["future"],
            x_categoricals=["symbol"],
            embedding_sizes={"symbol": (config.n_symbols, config.var_dim)},
            hidden_continuous_size=hidden_continuous_size or config.var_dim,
            output_transformer=lambda out: out["prediction"],
        )


def matched_continuous_size(config: TFTConfig, params: int) -> int:
    """The `hidden_continuous_size` (at most `var_dim`) with the parameter count nearest
    `params`."""
    counts = {
        size: sum(p.numel() for p in ptf_model(config, size).parameters())
        for size in range(config.var_dim, 0, -1)
    }
    return min(counts, key=lambda size: abs(counts[size] - params))


def _ptf_reals(config: TFTConfig) -> dict[str, list[str]]:
    return {
        "static": [f"s{i}" for i in range(config.n_static_reals)],
        "hist": [f"h{i}" for i in range(config.n_hist)],
        "future": [f"f{i}" for i in range(config.n_future)],
    }


def ptf_inputs(config: TFTConfig, batch: int) -> dict[str, torch.Tensor]:
    n_reals = config.n_static_reals + config.n_hist + config.n_future
    g = torch.Generator().manual_seed(batch)
    return {
        "encoder_cat": torch.zeros(batch, config.lookback, 1, dtype=torch.long),
        "decoder_cat": torch.zeros(batch, config.horizon, 1, dtype=torch.long),
        "encoder_cont": torch.randn(batch, config.lookback, n_reals, generator=g),
        "decoder_cont": torch.randn(batch, config.horizon, n_reals, generator=g),
        "encoder_lengths": torch.full((batch,), config.lookback),
        "decoder_lengths": torch.full((batch,), config.horizon),
        "target_scale": torch.ones(batch, 2),
    }


def anchors(config: TFTConfig, barcast_params: int) -> dict[str, dict[str, Any]]:
    """The two pytorch-forecasting anchors: their continuous size, parameters and design."""
    matched = matched_continuous_size(config, barcast_params)
    out: dict[str, dict[str, Any]] = {}
    for name, size, design in (
        ("ptf", config.var_dim, "same sizes, not the same architecture: its per-variable "
         "GRNs output hidden wide and the variables are weighted at that width; barcast's are "
         "var_dim wide, projected to hidden once"),
        ("ptf_matched", matched, "hidden_continuous_size shrunk to the parameter count nearest "
         "barcast's, hidden, heads and layers unchanged; still the other architecture"),
    ):  # fmt: skip
        model = ptf_model(config, size).eval()
        params = sum(p.numel() for p in model.parameters())
        out[name] = {
            "hidden_continuous_size": size,
            "params": params,
            "params_over_barcast": round(params / barcast_params, 3),
            "design": design,
            "model": model,
        }
    return out
