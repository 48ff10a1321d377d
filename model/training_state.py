"""The state of an unfinished `barcast train`, saved after every epoch, so that `--resume`
continues from the last completed epoch and ends with the very checkpoint an uninterrupted
run writes.

One file in the output folder, `training_state.safetensors`, replaced atomically each epoch:
the model's weights, the best epoch's weights and the optimizer's tensors; in its metadata
(JSON) the completed epochs' history, the early-stopping counters, the optimizer's settings,
the LR schedule, the state of every random generator the loop draws from, and the run's
identity (configuration, data, split), which a resume must match. No pickle. The file is
removed once the checkpoint is written: a finished run has nothing to resume.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from model.checkpoint import durable_replace
from model.guards import TrainingError

STATE_FILE = "training_state.safetensors"
FORMAT = "barcast-training-state"
VERSION = 2  # 2: the run's identity names its sources and products


@dataclass
class Progress:
    """Where the epoch loop stands: completed epochs, their records, early stopping."""

    epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_val: float = math.inf
    stale: int = 0


@dataclass
class Loop:
    """What one epoch changes besides the weights."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    order: np.random.Generator  # draws each epoch's window order
    progress: Progress = field(default_factory=Progress)
    best: dict[str, torch.Tensor] | None = None  # the best epoch's weights


class TrainingState:
    """The state file of one run, `identity` naming the run it belongs to."""

    def __init__(self, out_dir: Path, identity: dict[str, Any]) -> None:
        self.path = Path(out_dir) / STATE_FILE
        self.identity = json.loads(json.dumps(identity))  # as it reads back

    def save(self, loop: Loop) -> None:
        """Write the state after a completed epoch (a temporary file, then a rename)."""
        assert loop.best is not None  # set by the first epoch
        tensors = {f"model.{k}": v for k, v in loop.model.state_dict().items()}
        tensors |= {f"best.{k}": v for k, v in loop.best.items()}
        optimizer = loop.optimizer.state_dict()
        for index, values in optimizer["state"].items():
            tensors |= {f"optimizer.{index}.{k}": v for k, v in values.items()}
        tensors["rng.torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            tensors |= {f"rng.cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())}
        tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        meta = {
            "identity": self.identity,
            "progress": vars(loop.progress),
            "param_groups": optimizer["param_groups"],
            "schedule": loop.schedule.state_dict(),
            "rng": _rng_states(loop.order),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        header = {"format": FORMAT, "version": str(VERSION), "state": json.dumps(meta)}
        save_file(tensors, str(tmp), header)
        size, needed = (
            tmp.stat().st_size,
            sum(t.numel() * t.element_size() for t in tensors.values()),
        )
        if size < needed:  # the seed report's 16-byte checkpoints
            raise TrainingError(f"{tmp}: {size} bytes written for {needed} bytes of tensors")
        durable_replace(tmp, self.path)

    def load(self, loop: Loop) -> None:
        """Restore `loop` (built as for a new run) to the saved epoch's end."""
        try:
            with safe_open(str(self.path), framework="pt") as f:
                header = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (no __iter__)
        except (SafetensorError, OSError) as exc:  # cut short, or another file by its name
            raise TrainingError(
                f"{self.path}: unreadable ({exc}); delete it and train without --resume"
            ) from None
        if header.get("format") != FORMAT or header.get("version") != str(VERSION):
            raise TrainingError(
                f"{self.path}: not a training state this barcast reads (format "
                f"{header.get('format')!r}, version {header.get('version')!r}); delete it and "
                "train without --resume"
            )
        meta = json.loads(header["state"])
        self._check_identity(meta["identity"])
        try:
            loop.model.load_state_dict(_prefixed(tensors, "model."))
            loop.best = _prefixed(tensors, "best.")
            state = {
                int(i): _prefixed(tensors, f"optimizer.{i}.")
                for i in {k.split(".")[1] for k in tensors if k.startswith("optimizer.")}
            }
            groups = [g | {"betas": tuple(g["betas"])} for g in meta["param_groups"]]
            loop.optimizer.load_state_dict({"state": state, "param_groups": groups})
        except (RuntimeError, KeyError, ValueError) as exc:
            raise TrainingError(
                f"{self.path} does not fit this model ({exc}); delete it and train without --resume"
            ) from None
        loop.schedule.load_state_dict(meta["schedule"])
        loop.progress = Progress(**meta["progress"])
        _set_rng_states(meta["rng"], loop.order, tensors)

    def _check_identity(self, saved: dict[str, Any]) -> None:
        if saved == self.identity:
            return
        differ = sorted(
            k for k in saved.keys() | self.identity.keys() if saved.get(k) != self.identity.get(k)
        )
        raise TrainingError(
            f"{self.path} belongs to another run ({', '.join(differ)} differ): resume with the "
            "same --data, range, split and settings, or delete it to start over"
        )

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _prefixed(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _rng_states(order: np.random.Generator) -> dict[str, Any]:
    version, state, gauss = random.getstate()
    legacy = np.random.get_state(legacy=False)
    assert isinstance(legacy, dict)
    legacy["state"]["key"] = legacy["state"]["key"].tolist()
    return {
        "python": [version, list(state), gauss],
        "numpy": legacy,
        "order": order.bit_generator.state,
    }


def _set_rng_states(
    states: dict[str, Any], order: np.random.Generator, tensors: dict[str, torch.Tensor]
) -> None:
    version, state, gauss = states["python"]
    random.setstate((version, tuple(state), gauss))
    legacy = states["numpy"]
    legacy["state"]["key"] = np.asarray(legacy["state"]["key"], dtype=np.uint32)
    np.random.set_state(legacy)
    order.bit_generator.state = states["order"]
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [
        tensors[f"rng.cuda.{i}"] for i in range(sum(k.startswith("rng.cuda.") for k in tensors))
    ]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
