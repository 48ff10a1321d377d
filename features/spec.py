"""What the registry knows about one feature: its name, warm-up, formula and parameters."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Spec:
    """One output column. `warmup` = bars before the first valid value (TA-Lib's "lookback"):
    the value at 0-based bar index i is defined iff i >= warmup, and NaN before."""

    name: str
    warmup: int
    formula: str
    params: tuple[tuple[str, float | int | str], ...] = field(default=())


def spec(name: str, warmup: int, formula: str, **params: float | int | str) -> Spec:
    return Spec(name, warmup, formula, tuple(sorted(params.items())))
