"""TFT inference latency and training memory: barcast vs pytorch-forecasting, one run.

Both models get the same hidden size, heads, LSTM layers, lookback, horizon, 3 quantiles and
227 historical + 10 static (a symbol embedding + 9 reals) + 10 known-future inputs.

They are not the same architecture. Their variable selection differs: barcast's per-variable
networks are `var_dim` wide end to end, the variables are weighted in that space and
projected to `hidden` once (one `(V * var_dim, hidden)` matmul), the selection weights come from
a GRN over the raw values; pytorch-forecasting scales each variable to `hidden_continuous_size`
and its own GRN outputs `hidden` wide, the variables are weighted at `hidden` width, the weights
come from a GRN over the flattened embeddings. So two anchors:

- `ptf`: pytorch-forecasting at the same sizes (`hidden_continuous_size` = `var_dim`): more
  parameters than barcast (both counts in the results file);
- `ptf_matched`: the same with `hidden_continuous_size` shrunk to the value whose parameter
  count is nearest barcast's (everything else unchanged).

Forward latency p50/p99 at each batch size, the models called in turn so machine load hits them
alike: barcast fp32, the worker's cached path (one new bar encoded + the window forecast, by the
worker's TorchScript programs, unpadded), both anchors; and bf16 on CUDA when a GPU is visible.
Training-step peak memory: each model in a fresh subprocess, peak RSS above its idle RSS.

    make bench-deps  # the anchors: pytorch-forecasting and its pins, not in `make install`
    .venv/bin/python -m benchmarks.model [--threads 1] [--hidden 128] [--budget-s 20]
        [--batches 1,8,64,256] [--no-anchors] [--no-train-memory]  # the last two: gpu.sh

Writes benchmarks/results/model.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.model.anchors import anchors, ptf_inputs, ptf_model, require_ptf
from benchmarks.provenance import loadavg, run_metadata
from model.config import TFTConfig
from model.memory import peak_rss_mb
from model.serving.programs import chunk_programs, chunked
from model.tft import TemporalFusionTransformer

RESULTS = Path(__file__).resolve().parents[1] / "results" / "model.json"
BATCHES = (1, 8, 64, 256)
GOALS = {"speedup_batch_256": 10.0, "speedup_batch_1": 5.0, "cached_batch_1_ms": 3.2}


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
    """The worker's path for one new bar per window, unpadded (model.serving.forecast_engine with
    max_batch=1 at batch 1): the static contexts computed once (the worker keeps one per
    symbol), the new bar encoded and the window forecast by the worker's own programs
    (`chunk_programs`: TorchScript traces on CPU fp32) at this batch size."""
    symbol, static, hist, future = barcast_inputs(config, batch)
    programs = chunk_programs(model, torch.device("cpu"), "fp32", batch, batch)
    with torch.inference_mode():
        context = model.static_context(symbol, static)
        cache = model.encode_history(hist, context.selection)[0]

    def step() -> Any:
        new = chunked(programs.encode, hist[:, -1:], context.selection)
        window = torch.cat([cache[:, 1:], new], dim=1)
        return chunked(programs.forward, window, *context[:4], future)

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


def train_step_peak_mb(
    continuous_size: int | None, config: TFTConfig, batch: int, threads: int
) -> float:
    """Peak RSS growth (MB) of two training steps, in a fresh subprocess: barcast's model, or
    pytorch-forecasting's with this `hidden_continuous_size`."""
    code = (
        "import sys, json; from benchmarks.model.run import _train_child; "
        f"print(json.dumps(_train_child({continuous_size!r}, "
        f"{json.dumps(config.to_dict())!r}, {batch}, {threads})))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _train_child(continuous_size: int | None, config_json: str, batch: int, threads: int) -> float:
    torch.set_num_threads(threads)
    config = TFTConfig.from_dict(json.loads(config_json))
    levels = torch.tensor(config.quantiles)
    y = torch.randn(batch, config.horizon)
    if continuous_size is None:
        model: torch.nn.Module = TemporalFusionTransformer(config)
        inputs = barcast_inputs(config, batch)

        def predict() -> torch.Tensor:
            return model(*inputs).quantiles
    else:
        model = ptf_model(config, continuous_size)
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


def batch_row(
    models: dict[str, Any], config: TFTConfig, batch: int, budget_s: float
) -> dict[str, float]:
    """p50 / p99 latency (ms) of every model at one batch size, and the speed-ups."""
    barcast, gpu = models["barcast"], models["gpu"]
    inputs, x = barcast_inputs(config, batch), ptf_inputs(config, batch)
    runs = {
        "barcast": lambda: barcast(*inputs),
        "barcast_cached": cached_step(barcast, config, batch),
    } | {name: (lambda m=m: m(x)) for name, m in models["anchors"].items()}
    row: dict[str, float] = {}
    for name, values in timings(runs, budget_s, lambda: None).items():
        row[f"{name}_ms"], row[f"{name}_p99_ms"] = percentiles(values)
    if gpu is not None:
        gpu_inputs = barcast_inputs(config, batch, "cuda")

        def on_gpu() -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return gpu(*gpu_inputs)

        row["barcast_bf16_cuda_ms"], row["barcast_bf16_cuda_p99_ms"] = percentiles(
            timings({"gpu": on_gpu}, budget_s, torch.cuda.synchronize)["gpu"]
        )
    for name in models["anchors"]:
        row[f"speedup_vs_{name}"] = row[f"{name}_ms"] / row["barcast_ms"]
    return row


def goals_met(
    rows: dict[str, dict[str, float]], memory: dict[str, float], anchor: str
) -> dict[str, bool]:
    return {
        f"speedup_batch_{b}": rows[b][f"speedup_vs_{anchor}"] >= GOALS[f"speedup_batch_{b}"]
        for b in ("256", "1")
        if b in rows  # --batches may leave one out
    } | ({"less_training_memory": memory["barcast"] < memory[anchor]} if memory else {})


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (all models)")
    parser.add_argument("--hidden", type=int, default=TFTConfig.hidden)
    parser.add_argument("--budget-s", type=float, default=20.0, help="time budget per batch size")
    parser.add_argument("--train-batch", type=int, default=32)
    parser.add_argument(
        "--batches",
        type=lambda text: tuple(int(b) for b in text.split(",")),
        default=BATCHES,
        help=f"comma-separated batch sizes (default {','.join(map(str, BATCHES))}; the speed-up "
        "goals need 1 and 256)",
    )
    parser.add_argument(
        "--train-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure the training step's peak RSS (three subprocesses; gpu.sh skips it)",
    )
    parser.add_argument(
        "--anchors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time pytorch-forecasting too (gpu.sh leaves it out: its CUDA rows need none)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every row of the table, the memory and the goals, with the run's provenance."""
    torch.set_num_threads(args.threads)
    provenance = run_metadata()  # now: others may commit while this runs
    torch.manual_seed(0)
    # the window encoder: like pytorch-forecasting's TFT, it encodes each forecast's whole
    # window (the stream encoder's serving cost is the pipeline benchmark's encoders rows)
    config = TFTConfig(hidden=args.hidden, n_symbols=4, encoder="window")
    barcast = TemporalFusionTransformer(config).eval()
    ptf = anchors(config, barcast.n_params()) if args.anchors else {}
    cuda = torch.cuda.is_available()
    models = {
        "barcast": barcast,
        "gpu": TemporalFusionTransformer(config).cuda().eval() if cuda else None,
        "anchors": {name: a.pop("model") for name, a in ptf.items()},
    }
    rows: dict[str, dict[str, float]] = {}
    for batch in args.batches:
        rows[str(batch)] = row = batch_row(models, config, batch, args.budget_s)
        p50 = {k: v for k, v in row.items() if k.endswith("_ms") and not k.endswith("_p99_ms")}
        print(f"batch {batch:>3}: " + "  ".join(f"{k} {v:.2f}" for k, v in p50.items()), flush=True)
    sizes = {"barcast": None} | {name: a["hidden_continuous_size"] for name, a in ptf.items()}
    memory = {
        name: train_step_peak_mb(size, config, args.train_batch, args.threads)
        for name, size in sizes.items()
        if args.train_memory
    }
    return {
        "config": config.to_dict(),
        "threads": args.threads,
        "cuda": torch.cuda.get_device_name() if cuda else None,
        "units": "ms per forward call (p50; *_p99_ms: 99th percentile)",
        "params": {"barcast": barcast.n_params()} | {n: a["params"] for n, a in ptf.items()},
        "anchors": ptf,
        "train_step_peak_mb": memory | {"batch_size": args.train_batch} if memory else None,
        "batches": rows,
        "goals": GOALS,
        "goals_met": {name: goals_met(rows, memory, name) for name in ptf},
        "cached_goal_met": rows["1"]["barcast_cached_ms"] <= GOALS["cached_batch_1_ms"]
        if "1" in rows
        else None,
        "provenance": provenance | {"loadavg_end": loadavg()},
    }


def main() -> None:
    args = parse_args()
    if args.anchors:
        require_ptf()
    result = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print_table(result)


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\nTFT forward latency, p50 / p99 ms ({result['threads']} CPU thread(s), hidden "
        f"{result['config']['hidden']}, lookback {result['config']['lookback']})"
    )
    names = ("barcast", "barcast_cached", *result["anchors"])
    print(f"{'batch':>5} | " + " | ".join(f"{n:>19}" for n in names) + " | speed-up vs anchors")
    for batch, r in result["batches"].items():
        cells = [f"{r[f'{n}_ms']:8.2f} / {r[f'{n}_p99_ms']:8.2f}" for n in names]
        speedups = " / ".join(f"{r[f'speedup_vs_{n}']:.1f}x" for n in result["anchors"])
        print(f"{batch:>5} | " + " | ".join(f"{c:>19}" for c in cells) + f" | {speedups}")
    p, m = result["params"], result["train_step_peak_mb"]
    print(f"parameters: barcast {p['barcast']:,}")
    for name, a in result["anchors"].items():
        print(
            f"  {name}: {a['params']:,} ({a['params_over_barcast']:.3f}x), "
            f"hidden_continuous_size {a['hidden_continuous_size']}: {a['design']}"
        )
    if m:
        print(
            f"training step (batch {m['batch_size']}) peak memory: "
            + ", ".join(f"{n} {m[n]:.0f} MB" for n in ("barcast", *result["anchors"]))
        )
    print(f"goals {result['goals']}: met {result['goals_met']}")
    print(f"load average at start / end: {result['provenance']['loadavg']} / "
          f"{result['provenance']['loadavg_end']}")  # fmt: skip
