"""A pre-registered walk-forward protocol: the folds, each with its data and explicit dates.

A protocol file (JSON; the registered one is `benchmarks/walk_forward/protocol.json`) is
committed before the run it governs:

    {"name": ..., "frozen": {"commit": ..., "recipe": ...}, "recipe": {FIELD: VALUE},
     "compare": [GROUP, GROUP],
     "sources": {NAME: {"file": FILE} | {"firstrate": true, "symbol": SYMBOL,
                        "held_out_from": DATE}},
     "folds": [{"name": ..., "group": ..., "sources": [NAME, ...],
                "train": [START, END], "val": [START, END], "calib": [START, END],
                "test": [START, END], "recipe": {FIELD: VALUE}}
               | {"name": ..., "group": ..., "train_sources": [SOURCE, ...],
                  "test_sources": [SOURCE, ...]}]}

A dated fold trains on its sources over [train start, calibration end), its validation and
calibration periods split off by `barcast train --val-start/--calib-start/--test-start`, and is
evaluated (`--split test`) on its sources from the validation start (history for the slowest
baseline) to the test end. A leave-one-product-out fold trains on `train_sources` (each
`{"source": NAME}` with an optional `"range": [START, END]`) with the product's default
fractions and is evaluated on `test_sources` with `--split all`: their first 20 % calibrates
every forecaster. The protocol's `recipe` (the defaults' overrides) starts from the encoder its
`frozen.model` names: a protocol frozen with the window encoder runs it still. A fold's optional
`recipe` overrides the protocol's for that fold alone (two
settings compared on the same periods, each fold named for its group; `compare` names the two
groups, and the results compare their TFTs window by window). Dates are UTC
(`YYYY-MM-DD`), ranges [start, end). A source with `held_out_from` is never read from that date
on: its later bars are kept for a final evaluation, and a fold that asks for them, or for an
open range, is refused before anything runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

PERIODS = ("train", "val", "calib", "test")


class ProtocolError(ValueError):
    """A protocol the runner refuses; the message names the fold and the fix."""


@dataclass(frozen=True)
class SourceRange:
    """One data source of a fold and its UTC range [start, end) (None: the whole source)."""

    source: str
    start: str | None = None
    end: str | None = None


@dataclass(frozen=True)
class Fold:
    name: str
    group: str
    definition: dict[str, Any]  # as written in the protocol
    train: tuple[SourceRange, ...]
    evaluate: tuple[SourceRange, ...]
    split: str  # `barcast evaluate --split`
    dates: dict[str, str]  # val_start, calib_start, test_start for `barcast train`; {} if none

    @property
    def digest(self) -> str:
        return digest(self.definition)

    @property
    def recipe(self) -> dict[str, Any]:
        """The fold's own overrides of the protocol's recipe."""
        return dict(self.definition.get("recipe", {}))


@dataclass(frozen=True)
class Protocol:
    name: str
    path: Path
    frozen: dict[str, Any]
    recipe: dict[str, Any]
    sources: dict[str, dict[str, Any]]
    folds: tuple[Fold, ...]
    compare: list[str]  # two groups whose TFTs are compared on the same windows (or none)

    @classmethod
    def load(cls, path: Path) -> Protocol:
        values = json.loads(Path(path).read_text())
        sources = values["sources"]
        folds = tuple(parse_fold(f, sources) for f in values["folds"])
        names = [f.name for f in folds]
        if len(set(names)) != len(names):
            raise ProtocolError(f"{path}: fold names repeat; each fold needs its own name")
        compare = values.get("compare", [])
        groups = {f.group for f in folds}
        if compare and (len(compare) != 2 or not set(compare) <= groups):
            raise ProtocolError(
                f"{path}: compare {compare} must name two of the folds' groups {sorted(groups)}"
            )
        for fold in folds:
            for part in (*fold.train, *fold.evaluate):
                check_held_out(fold.name, part, sources[part.source])
        frozen = values.get("frozen", {})
        # The encoder it froze: the default changed after some protocols ran (model.config)
        encoder = {k: v for k, v in frozen.get("model", {}).items() if k == "encoder"}
        return cls(
            values["name"],
            Path(path),
            frozen,
            encoder | values.get("recipe", {}),
            sources,
            folds,
            compare,
        )

    def fold(self, name: str) -> Fold:
        for fold in self.folds:
            if fold.name == name:
                return fold
        raise ProtocolError(
            f"no fold {name!r} in {self.path}; it has {[f.name for f in self.folds]}"
        )


def parse_fold(values: dict[str, Any], sources: dict[str, Any]) -> Fold:
    name, group = values["name"], values["group"]
    if "sources" in values:
        periods = {p: tuple(values[p]) for p in PERIODS}
        for earlier, later in itertools.pairwise(PERIODS):
            if periods[earlier][1] != periods[later][0]:
                raise ProtocolError(
                    f"fold {name}: {earlier} ends {periods[earlier][1]} but {later} starts "
                    f"{periods[later][0]}; the periods must follow one another"
                )
        for period, (start, end) in periods.items():
            if not pd.Timestamp(start) < pd.Timestamp(end):
                raise ProtocolError(f"fold {name}: {period} [{start}, {end}) is empty")
        known(name, values["sources"], sources)
        train = tuple(
            SourceRange(s, periods["train"][0], periods["test"][0]) for s in values["sources"]
        )
        evaluate = tuple(
            SourceRange(s, periods["val"][0], periods["test"][1]) for s in values["sources"]
        )
        dates = {
            "val_start": periods["val"][0],
            "calib_start": periods["calib"][0],
            "test_start": periods["test"][0],
        }
        return Fold(name, group, values, train, evaluate, "test", dates)
    train = tuple(source_range(s) for s in values["train_sources"])
    evaluate = tuple(source_range(s) for s in values["test_sources"])
    known(name, [s.source for s in (*train, *evaluate)], sources)
    overlap = {s.source for s in train} & {s.source for s in evaluate}
    if overlap:
        raise ProtocolError(f"fold {name}: {sorted(overlap)} both trains and tests the model")
    return Fold(name, group, values, train, evaluate, "all", {})


def source_range(values: dict[str, Any]) -> SourceRange:
    start, end = values.get("range", (None, None))
    return SourceRange(values["source"], start, end)


def known(fold: str, names: list[str], sources: dict[str, Any]) -> None:
    missing = sorted(set(names) - set(sources))
    if missing:
        raise ProtocolError(f"fold {fold}: sources {missing} are not in the protocol's sources")


def check_held_out(fold: str, part: SourceRange, source: dict[str, Any]) -> None:
    """Refuse a range that reaches a source's held-out bars (or could: an open range)."""
    held_out = source.get("held_out_from")
    if held_out is None:
        return
    if part.start is None or part.end is None:
        raise ProtocolError(
            f"fold {fold}: {part.source} needs an explicit [start, end): its bars from "
            f"{held_out} on are held out for the final evaluation and must never be read"
        )
    if pd.Timestamp(part.end) > pd.Timestamp(held_out):
        raise ProtocolError(
            f"fold {fold}: {part.source} up to {part.end} reaches its held-out bars (from "
            f"{held_out} on, kept for the final evaluation that no design step may see); end "
            f"the fold's ranges by {held_out}"
        )


def source_location(
    name: str, source: dict[str, Any], data_dir: Path, firstrate_dir: Path
) -> tuple[Path, str | None]:
    """Where a source's bars are and the symbol they take (a folder needs one)."""
    if "file" in source:
        return data_dir / source["file"], None
    if not firstrate_dir.is_dir():
        raise ProtocolError(
            f"source {name}: {firstrate_dir} is not a folder; set BARCAST_FIRSTRATE_DIR to the "
            "folder of its FirstRate day files (e.g. dailydata/)"
        )
    return firstrate_dir, source["symbol"]


def digest(values: Any) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
