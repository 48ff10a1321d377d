"""The 227 features in their fixed order, their groups, warm-ups and the feature-set fingerprint.

Each kernel module declares its own features (`SPECS`) next to the code that computes them, with
`FIRST`, the index of its first feature; this module concatenates them and checks that the
groups land exactly on the index ranges the model and the serving contract rely on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from types import ModuleType

from features import (
    adaptive,
    adx,
    basic,
    core,
    cusum,
    long_memory,
    micro,
    norm,
    price_osc,
    price_trend,
    regime,
    stats,
    timefeat,
    volume,
)
from features.primitives import RING, VAR_FLOOR, WINDOWS

# Bump whenever a kernel changes what any feature means (a formula, a seed, a guard) without
# changing a declared parameter: the fingerprint, and so every checkpoint's check, follows it.
CODE_VERSION = 2
N_FEATURES = 227

GROUP_RANGES: dict[str, tuple[int, int]] = {  # inclusive index ranges, from the issue
    "basic bar": (0, 14),
    "advanced price": (15, 74),
    "time": (75, 89),
    "volume": (90, 104),
    "statistical": (105, 144),
    "microstructure": (145, 190),
    "normalization": (191, 200),
    "CUSUM": (201, 210),
    "ADX family": (211, 215),
    "regime transition probabilities": (216, 220),
    "adaptive strategy metrics": (221, 224),
    "long memory": (225, 226),
}
MODULES: tuple[ModuleType, ...] = (
    basic,
    price_trend,
    price_osc,
    timefeat,
    volume,
    stats,
    micro,
    norm,
    cusum,
    adx,
    regime,
    adaptive,
    long_memory,
)
# Engine-wide constants that shape many features at once.
ENGINE_PARAMS: dict[str, object] = {
    "windows": [int(w) for w in WINDOWS],
    "ring": RING,
    "var_floor": VAR_FLOOR,
    "atr_period": core.ATR_PERIOD,
    "ewma_fast": core.EWMA_FAST,
    "ewma_slow": core.EWMA_SLOW,
}


@dataclass(frozen=True)
class Feature:
    index: int
    name: str
    group: str
    warmup: int
    formula: str
    params: tuple[tuple[str, float | int | str], ...]


def collect(modules: tuple[ModuleType, ...] = MODULES) -> tuple[Feature, ...]:
    features: list[Feature] = []
    for module in modules:
        if len(features) != module.FIRST:
            raise RuntimeError(
                f"{module.__name__}.FIRST = {module.FIRST} but {len(features)} features precede "
                "it: fix FIRST or the SPECS of the modules before it"
            )
        for s in module.SPECS:
            features.append(
                Feature(len(features), s.name, module.GROUP, s.warmup, s.formula, s.params)
            )
    return tuple(features)


def check(features: tuple[Feature, ...]) -> None:
    """Raise if the set is not N_FEATURES unique names laid out on GROUP_RANGES."""
    if len(features) != N_FEATURES:
        raise RuntimeError(
            f"the registry holds {len(features)} features, the contract is {N_FEATURES}"
        )
    names = [f.name for f in features]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RuntimeError(f"duplicate feature names: {duplicates}")
    for group, (lo, hi) in GROUP_RANGES.items():
        found = [f.index for f in features if f.group == group]
        if found != list(range(lo, hi + 1)):
            span = f"{found[0]}-{found[-1]}" if found else "none"
            raise RuntimeError(f"group {group!r} occupies {span}, the contract is {lo}-{hi}")


def fingerprint(
    features: tuple[Feature, ...],
    engine_params: dict[str, object] = ENGINE_PARAMS,
    code_version: int = CODE_VERSION,
) -> str:
    """16 hex digits of SHA-256 over names, order, groups, warm-ups, parameters, version."""
    payload = {
        "code_version": code_version,
        "engine": engine_params,
        "features": [
            [f.index, f.name, f.group, f.warmup, [list(p) for p in f.params]] for f in features
        ],
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


FEATURES = collect()
check(FEATURES)
FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
WARMUPS: tuple[int, ...] = tuple(f.warmup for f in FEATURES)
FINGERPRINT = fingerprint(FEATURES)
