"""Static (per symbol) and known-future (calendar) model inputs, derived from the symbol and time.

Static: a learned embedding of the CME product root plus 9 reals from a small product table
(asset-class one-hot, log tick size, log contract multiplier). Known future: 10 calendar
variables of each future bar, in exchange time (US/Central), so they follow daylight saving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import pandas as pd

NS_PER_MIN = 60_000_000_000
NS_PER_DAY = 1440 * NS_PER_MIN
EXCHANGE_TZ = "America/Chicago"
HALT_MINUTE = 16 * 60  # CME Globex daily maintenance halt, US/Central
RTH = (8 * 60 + 30, 15 * 60)  # US regular trading hours, US/Central
EUROPE = (2 * 60, 8 * 60 + 30)  # London open to the US open, US/Central


class AssetClass(IntEnum):
    EQUITY = 0
    RATES = 1
    FX = 2
    ENERGY = 3
    METALS = 4
    AGRICULTURE = 5
    OTHER = 6


@dataclass(frozen=True)
class Product:
    root: str
    asset_class: AssetClass
    tick_size: float
    multiplier: float


def _products(*rows: tuple[str, AssetClass, float, float]) -> dict[str, Product]:
    return {root: Product(root, cls, tick, mult) for root, cls, tick, mult in rows}


_E, _R, _F, _N, _M, _A = (
    AssetClass.EQUITY,
    AssetClass.RATES,
    AssetClass.FX,
    AssetClass.ENERGY,
    AssetClass.METALS,
    AssetClass.AGRICULTURE,
)
PRODUCTS = _products(
    ("ES", _E, 0.25, 50), ("MES", _E, 0.25, 5), ("NQ", _E, 0.25, 20), ("MNQ", _E, 0.25, 2),
    ("RTY", _E, 0.1, 50), ("M2K", _E, 0.1, 5), ("YM", _E, 1.0, 5), ("MYM", _E, 1.0, 0.5),
    ("ZT", _R, 1 / 256, 2000), ("ZF", _R, 1 / 256, 1000), ("ZN", _R, 1 / 128, 1000),
    ("TN", _R, 1 / 128, 1000), ("ZB", _R, 1 / 32, 1000), ("UB", _R, 1 / 32, 1000),
    ("SR3", _R, 0.0025, 2500),
    ("6E", _F, 0.00005, 125_000), ("6J", _F, 0.0000005, 12_500_000), ("6B", _F, 0.0001, 62_500),
    ("6A", _F, 0.00005, 100_000), ("6C", _F, 0.00005, 100_000), ("6S", _F, 0.00005, 125_000),
    ("M6E", _F, 0.0001, 12_500),
    ("CL", _N, 0.01, 1000), ("MCL", _N, 0.01, 100), ("NG", _N, 0.001, 10_000),
    ("RB", _N, 0.0001, 42_000), ("HO", _N, 0.0001, 42_000),
    ("GC", _M, 0.1, 100), ("MGC", _M, 0.1, 10), ("SI", _M, 0.005, 5000), ("HG", _M, 0.0005, 25_000),
    ("ZC", _A, 0.25, 50), ("ZS", _A, 0.25, 50), ("ZW", _A, 0.25, 50), ("ZL", _A, 0.01, 600),
    ("ZM", _A, 0.1, 100), ("LE", _A, 0.025, 400), ("HE", _A, 0.025, 400),
)  # fmt: skip

# CME outright: product root, month code, one or two year digits (6EH4, ESU24).
_OUTRIGHT = re.compile(r"^([A-Z0-9]{1,4}?)([FGHJKMNQUVXZ])(\d{1,2})$")

STATIC_NAMES = (
    "symbol_embedding",
    *(f"asset_{c.name.lower()}" for c in AssetClass),
    "log10_tick_size",
    "log10_multiplier",
)
FUTURE_NAMES = (
    "minute_of_day_sin", "minute_of_day_cos", "minute_of_hour_sin", "minute_of_hour_cos",
    "day_of_week_sin", "day_of_week_cos", "us_regular_hours", "europe_hours",
    "minutes_to_halt", "horizon_step",
)  # fmt: skip
N_STATIC = len(STATIC_NAMES)
N_FUTURE = len(FUTURE_NAMES)


def product_root(symbol: str) -> str:
    """`6EH4` -> `6E`; a symbol that is not a CME outright (a spread, a parent) is its own root."""
    match = _OUTRIGHT.match(symbol.strip().upper())
    return match.group(1) if match else symbol.strip().upper()


def static_reals(symbol: str) -> np.ndarray:
    """The 9 real static variables of a symbol (float32); unknown products are `asset_other`."""
    product = PRODUCTS.get(product_root(symbol))
    out = np.zeros(N_STATIC - 1, dtype=np.float32)
    if product is None:
        out[AssetClass.OTHER] = 1.0
        return out
    out[product.asset_class] = 1.0
    out[len(AssetClass)] = np.log10(product.tick_size)
    out[len(AssetClass) + 1] = np.log10(product.multiplier)
    return out


@dataclass(frozen=True)
class SymbolVocab:
    """Product roots with a trained embedding row; row 0 stands for any other product."""

    roots: tuple[str, ...]

    @classmethod
    def from_symbols(cls, symbols: list[str]) -> SymbolVocab:
        return cls(tuple(sorted({product_root(s) for s in symbols})))

    @property
    def size(self) -> int:
        return len(self.roots) + 1

    def index(self, symbol: str) -> int:
        root = product_root(symbol)
        return self.roots.index(root) + 1 if root in self.roots else 0

    def encode(self, symbols: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Embedding rows `(B,)` int64 and static reals `(B, 9)` float32 for a list of symbols."""
        ids = np.array([self.index(s) for s in symbols], dtype=np.int64)
        reals = np.stack([static_reals(s) for s in symbols]) if symbols else np.zeros((0, 9))
        return ids, reals.astype(np.float32)


def future_covariates(ts_event: np.ndarray, horizon: int) -> np.ndarray:
    """Calendar variables of the bars opening k = 1..horizon minutes after each ts_event.

    ts_event `(B,)` int64 UTC ns (bar open) -> `(B, horizon, 10)` float32.
    """
    ts = np.asarray(ts_event, dtype=np.int64)
    steps = np.arange(1, horizon + 1, dtype=np.int64)
    future = (ts[:, None] + steps[None, :] * NS_PER_MIN).ravel()
    local = pd.DatetimeIndex(future.astype("datetime64[ns]"), tz="UTC").tz_convert(EXCHANGE_TZ)
    minute_of_hour = local.minute.to_numpy().astype(np.float64)
    minute_of_day = local.hour.to_numpy() * 60.0 + minute_of_hour
    weekday = local.day_of_week.to_numpy().astype(np.float64)
    is_weekday = weekday < 5
    day = 2 * np.pi * minute_of_day / 1440.0
    hour = 2 * np.pi * minute_of_hour / 60.0
    week = 2 * np.pi * weekday / 7.0
    out = np.stack(
        [
            np.sin(day),
            np.cos(day),
            np.sin(hour),
            np.cos(hour),
            np.sin(week),
            np.cos(week),
            is_weekday & (minute_of_day >= RTH[0]) & (minute_of_day < RTH[1]),
            is_weekday & (minute_of_day >= EUROPE[0]) & (minute_of_day < EUROPE[1]),
            ((HALT_MINUTE - minute_of_day) % 1440.0) / 1440.0,
            np.tile(steps / horizon, len(ts)),
        ],
        axis=-1,
    )
    return out.reshape(len(ts), horizon, N_FUTURE).astype(np.float32)
