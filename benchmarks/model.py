"""TFT inference latency and training memory: barcast vs pytorch-forecasting, one run.

Both models get the same hidden size, heads, LSTM layers, lookback, horizon, 3 quantiles and
225 historical + 10 static (a symbol embedding + 9 reals) + 10 known-future inputs
(pytorch-forecasting's `hidden_continuous_size` = barcast's `var_dim`). Forward latency p50/p99
at each batch size, the models called in turn so machine load hits them alike: barcast fp32,
barcast INT8 (dynamic quantization), the worker's cached path (one new bar encoded + the window
forecast), pytorch-forecasting's TemporalFusionTransformer; and bf16 on CUDA when a GPU is
visible.
Training-step peak memory: each model in a fresh subprocess, peak RSS above its idle RSS.

    .venv/bin/python -m benchmarks.model [--threads 1] [--hidden 128] [--budget-s 20]

Needs the `bench` extra (pytorch-forecasting). Writes benchmarks/results/model.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file, this folder would shadow the `model` package
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np
import torch

from model.config import TFTConfig
from model.forecaster import quantize_int8
from model.tft import TemporalFusionTransformer
from model.train import peak_rss_mb

RESULTS = Path(__file__).resolve().parent / "results" / "model.json"
BATCHES = (1, 8, 64, 256)
GOALS = {"speedup_batch_256": 10.0, "speedup_batch_1": 5.0}


def ptf_model(config: TFTConfig) -> torch.nn.Module:
    """pytorch-forecasting's TFT with barcast's sizes and inputs."""
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
            hidden_continuous_size=config.var_dim,
            output_transformer=lambda out: out["prediction"],
        )


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


def barcast_inputs(config: TFTConfig, batch: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(batch)
    tensors = (
        torch.zeros(batch, dtype=torch.long),
        torch.randn(batch, config.n_static_reals, generator=g),
        torch.randn(batch, config.lookback, config.n_hist, generator=g),
        torch.randn(batch, config.horizon, config.n_future, generator=g),
    )
    return tuple(t.to(device) for t in tensors)


def cached_step(
    model: TemporalFusionTransformer, config: TFTConfig, batch: int
) -> Callable[[], Any]:
    """The worker's path: encode each window's newest bar, forecast from cached encodings."""
    symbol, static, hist, future = barcast_inputs(config, batch)
    with torch.inference_mode():
        cache = model.encode_history(hist, model.static_context(symbol, static).selection)[0]

    def step() -> Any:
        ctx = model.static_context(symbol, static)
        new = model.encode_history(hist[:, -1:], ctx.selection)[0]
        return model.forward_encoded(torch.cat([cache[:, 1:], new], dim=1), ctx, future)

    return step


def timings(
    runs: dict[str, Callable[[], Any]], budget_s: float, sync: Callable[[], None]
) -> dict[str, list[float]]:
    """Latencies (ms) of each run, called in round-robin so that load from other processes on
    a shared machine hits them alike; at least 3 rounds, then until the budget (max 200)."""
    out: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for fn in runs.values():
            fn()  # warm-up
        sync()
        started = time.perf_counter()
        while len(out[next(iter(runs))]) < 3 or (
            len(out[next(iter(runs))]) < 200 and time.perf_counter() - started < budget_s
        ):
            for name, fn in runs.items():
                t = time.perf_counter()
                fn()
                sync()
                out[name].append((time.perf_counter() - t) * 1e3)
    return out


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def train_step_peak_mb(which: str, config: TFTConfig, batch: int, threads: int) -> float:
    """Peak RSS growth (MB) of two training steps, in a fresh subprocess."""
    code = (
        "import sys, json; from benchmarks.model import _train_child; "
        f"print(json.dumps(_train_child({which!r}, {json.dumps(config.to_dict())!r}, "
        f"{batch}, {threads})))"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _train_child(which: str, config_json: str, batch: int, threads: int) -> float:
    torch.set_num_threads(threads)
    config = TFTConfig.from_dict(json.loads(config_json))
    levels = torch.tensor(config.quantiles)
    y = torch.randn(batch, config.horizon)
    if which == "barcast":
        model: torch.nn.Module = TemporalFusionTransformer(config)
        inputs = barcast_inputs(config, batch)

        def predict() -> torch.Tensor:
            return model(*inputs).quantiles
    else:
        model = ptf_model(config)
        x = ptf_inputs(config, batch)

        def predict() -> torch.Tensor:
            return model(x)["prediction"]

    optimizer = torch.optim.AdamW(model.parameters())
    idle = _rss_mb()
    for _ in range(2):
        err = y.unsqueeze(-1) - predict()
        loss = torch.maximum(levels * err, (levels - 1) * err).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return peak_rss_mb() - idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (both models)")
    parser.add_argument("--hidden", type=int, default=TFTConfig.hidden)
    parser.add_argument("--budget-s", type=float, default=20.0, help="time budget per batch size")
    parser.add_argument("--train-batch", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = TFTConfig(hidden=args.hidden, n_symbols=4)
    barcast = TemporalFusionTransformer(config).eval()
    int8 = quantize_int8(TemporalFusionTransformer(config).eval())
    ptf = ptf_model(config).eval()
    cuda = torch.cuda.is_available()
    gpu = TemporalFusionTransformer(config).cuda().eval() if cuda else None

    def cpu_sync() -> None:
        return None

    rows: dict[str, dict[str, float]] = {}
    for batch in BATCHES:
        inputs = barcast_inputs(config, batch)
        x = ptf_inputs(config, batch)
        runs = {
            "barcast": lambda inputs=inputs: barcast(*inputs),
            "barcast_int8": lambda inputs=inputs: int8(*inputs),
            "barcast_cached": cached_step(barcast, config, batch),
            "ptf": lambda x=x: ptf(x),
        }
        ms = timings(runs, args.budget_s, cpu_sync)
        row: dict[str, float] = {}
        for name, values in ms.items():
            row[f"{name}_ms"], row[f"{name}_p99_ms"] = percentiles(values)
        if gpu is not None:
            gpu_inputs = barcast_inputs(config, batch, "cuda")

            def on_gpu(gpu_inputs: tuple[torch.Tensor, ...] = gpu_inputs) -> Any:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return gpu(*gpu_inputs)

            row["barcast_bf16_cuda_ms"], row["barcast_bf16_cuda_p99_ms"] = percentiles(
                timings({"gpu": on_gpu}, args.budget_s, torch.cuda.synchronize)["gpu"]
            )
        row["speedup_vs_ptf"] = row["ptf_ms"] / row["barcast_ms"]
        row["int8_speedup_vs_ptf"] = row["ptf_ms"] / row["barcast_int8_ms"]
        rows[str(batch)] = row
        print(
            f"batch {batch:>3}: barcast {row['barcast_ms']:9.2f} ms  int8 "
            f"{row['barcast_int8_ms']:9.2f} ms  cached {row['barcast_cached_ms']:8.2f} ms  "
            f"ptf {row['ptf_ms']:10.2f} ms  speedup {row['speedup_vs_ptf']:6.1f}x",
            flush=True,
        )

    memory = {
        name: train_step_peak_mb(name, config, args.train_batch, args.threads)
        for name in ("barcast", "ptf")
    }
    result = {
        "config": config.to_dict(),
        "threads": args.threads,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name() if cuda else None,
        },
        "units": "ms per forward call (p50; *_p99_ms: 99th percentile)",
        "params": {"barcast": barcast.n_params(), "ptf": sum(p.numel() for p in ptf.parameters())},
        "train_step_peak_mb": memory | {"batch_size": args.train_batch},
        "batches": rows,
        "goals": {
            "speedup_batch_256": rows["256"]["speedup_vs_ptf"] >= GOALS["speedup_batch_256"],
            "speedup_batch_1": rows["1"]["speedup_vs_ptf"] >= GOALS["speedup_batch_1"],
            "less_training_memory": memory["barcast"] < memory["ptf"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print_table(result)


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\nTFT forward latency, p50 / p99 ms ({result['threads']} CPU thread(s), hidden "
        f"{result['config']['hidden']}, lookback {result['config']['lookback']})"
    )
    print(
        f"{'batch':>5} | {'barcast fp32':>17} | {'barcast int8':>17} | {'cached (worker)':>17} "
        f"| {'pytorch-forecasting':>21} | speedup"
    )
    for batch, r in result["batches"].items():
        cells = [
            f"{r[f'{n}_ms']:7.2f} / {r[f'{n}_p99_ms']:7.2f}"
            for n in ("barcast", "barcast_int8", "barcast_cached")
        ]
        print(
            f"{batch:>5} | {cells[0]:>17} | {cells[1]:>17} | {cells[2]:>17} | "
            f"{r['ptf_ms']:9.2f} / {r['ptf_p99_ms']:9.2f} | {r['speedup_vs_ptf']:6.1f}x"
        )
    p, m = result["params"], result["train_step_peak_mb"]
    print(f"parameters: barcast {p['barcast']:,}  pytorch-forecasting {p['ptf']:,}")
    print(
        f"training step (batch {m['batch_size']}) peak memory: barcast {m['barcast']:.0f} MB  "
        f"pytorch-forecasting {m['ptf']:.0f} MB"
    )
    print(f"goals: {result['goals']}")


if __name__ == "__main__":
    main()
