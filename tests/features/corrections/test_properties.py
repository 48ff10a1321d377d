"""Property tests: whatever arrives, the corrections step never raises, gives every input
exactly one outcome, emits only bars downstream can trust, and survives state serialization."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.bars import UNDEF_PRICE
from features.corrections import (
    SYNTHETIC,
    CorrectionConfig,
    CorrectionStats,
    Outcome,
    Status,
    SymbolState,
    correct,
    correct_history,
    flush,
)
from features.corrections.parse import REQUIRED

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = CorrectionConfig()
T0 = 1_704_150_000 * 10**9
MINUTE = 60 * 10**9
TICK = 50_000

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
GRID_PRICE = st.integers(21_800, 22_200).map(lambda n: n * TICK)  # 1.09 .. 1.11 on 6E's grid
PRICE = st.one_of(
    GRID_PRICE,
    GRID_PRICE,
    GRID_PRICE.map(lambda p: p * 3 // 2),  # 50 % spikes
    GRID_PRICE.map(lambda p: p * 1_000),  # scale slips
    GRID_PRICE.map(lambda p: p // 100),
    st.sampled_from([UNDEF_PRICE, None, float("nan"), 0, -TICK]),
)


@st.composite
def bar_values(draw: st.DrawFn, symbols: tuple[str, ...] = ("6EH4", "6EM4", "ESH4-ESM4")) -> Any:
    """Mostly plausible bars (small minute range: duplicates, late bars and gaps happen),
    sometimes with a junk field, a missing field, or encoded as bytes."""
    data: dict[str, Any] = {
        "instrument_id": 7,
        "symbol": draw(st.sampled_from(symbols)),
        "ts_event": T0 + draw(st.integers(0, 40)) * MINUTE,
        "rtype": 33,
        "publisher_id": 1,
        **dict(
            zip(
                ("open", "high", "low", "close"),
                draw(st.lists(PRICE, min_size=4, max_size=4)),
                strict=True,
            )
        ),
        "volume": draw(st.integers(0, 5)),
        "source": "prop",
    }
    if draw(st.integers(0, 9)) == 0:
        data[draw(st.sampled_from(REQUIRED))] = draw(JUNK)
    if draw(st.integers(0, 19)) == 0:
        del data[draw(st.sampled_from(REQUIRED))]
    if draw(st.booleans()):
        try:
            return orjson.dumps(data)
        except TypeError:  # junk orjson cannot encode (bytes, ints beyond 64 bits)
            return data
    return data


def arbitrary_dicts() -> st.SearchStrategy[dict[Any, Any]]:
    keys = st.one_of(st.sampled_from(REQUIRED), st.text(max_size=4))
    return st.dictionaries(keys, JUNK, max_size=14)


def one_outcome(value: Any) -> Outcome:
    state, stats = SymbolState(), CorrectionStats()
    outcomes = correct(value, state, CONFIG, stats).outcomes + flush(state, CONFIG, stats).outcomes
    assert len(outcomes) == 1 and stats.total == 1
    assert outcomes[0].value is value and outcomes[0].status in Status
    return outcomes[0]


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes_get_one_outcome(value: bytes) -> None:
    one_outcome(value)


@SETTINGS
@given(arbitrary_dicts())
def test_arbitrary_dicts_get_one_outcome(value: dict[Any, Any]) -> None:
    outcome = one_outcome(value)
    if outcome.status is Status.REJECTED:
        assert outcome.reason is not None and outcome.message


@SETTINGS
@given(st.lists(bar_values(), max_size=40))
def test_any_stream_gives_each_input_one_outcome_and_trustworthy_bars(values: list[Any]) -> None:
    history = correct_history(values)
    assert Counter(id(o.value) for o in history.outcomes) == Counter(id(v) for v in values)
    stats = history.stats
    assert stats.total == len(values)
    assert stats.clean + stats.corrected + stats.synthetic == len(history.clean)
    last_ts: dict[str, int] = {}
    for bar in history.clean:
        symbol, ts = bar["symbol"], bar["ts_event"]
        assert ts > last_ts.get(symbol, 0)  # per symbol strictly increasing
        last_ts[symbol] = ts
        assert bar["status"] in (Status.CLEAN, Status.CORRECTED, SYNTHETIC)
        o, h, low, c = (bar[f] for f in ("open", "high", "low", "close"))
        assert all(type(p) is int for p in (o, h, low, c))
        assert low <= min(o, c) and h >= max(o, c)
        assert low > 0 or CONFIG.allows_negative(symbol)


@SETTINGS
@given(st.lists(bar_values(symbols=("6EH4",)), max_size=40))
def test_state_survives_serialization_between_any_two_messages(values: list[Any]) -> None:
    stream = [v if isinstance(v, bytes) else _encoded(v) for v in values]

    def run(restart: bool) -> list[Outcome]:
        state, stats = SymbolState(), CorrectionStats()
        outcomes = []
        for value in stream:
            if restart:
                restored = SymbolState.from_bytes(state.to_bytes())
                assert restored == state
                state = restored
            outcomes += correct(value, state, CONFIG, stats).outcomes
        return outcomes + flush(state, CONFIG, stats).outcomes

    assert run(restart=True) == run(restart=False)


def _encoded(value: dict[str, Any]) -> bytes:
    """Bytes even for values orjson cannot encode: those become malformed input."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return repr(value).encode()
