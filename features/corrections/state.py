"""Per-symbol corrections state: small, exact, and serializable with orjson for the worker's store,
so a restarted worker continues exactly where it stopped."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from features.corrections.outcome import Change, Rule
from features.corrections.spikes import Move

STATE_VERSION = 1
# What an operator does about a state this barcast cannot read: a worker's stores are changelog
# topics named after its BARCAST_APP_ID, so under a new one every store starts empty.
START_AFRESH = "start the workers under a new BARCAST_APP_ID, whose stores start empty"


@dataclass(slots=True)
class Held:
    """A spike candidate waiting for the next bar: its input as received, the caller's ref, the
    candidate `bars.clean` value and what the rules found."""

    value: Any
    ref: Any
    bar: dict[str, Any]
    changes: tuple[Change, ...]
    moves: tuple[Move, ...]
    ts: int
    rtype: int
    digest: int

    @property
    def prices(self) -> list[int]:
        bar = self.bar
        return [bar["open"], bar["high"], bar["low"], bar["close"]]


@dataclass(slots=True)
class SymbolState:
    """What the rules remember about one symbol.

    `last` is the last accepted `bars.clean` value (reference close, gap-fill template; treat
    emitted dicts as read-only), `tick` the gcd of accepted prices (the symbol's price grid,
    learned), `returns` recent close-to-close log returns, `keys` recent accepted
    (ts_event, rtype, digest), `held` a spike candidate awaiting confirmation. `outage_until`:
    the end of the latest outage (live ingest lost the minutes before it: a gap across it is a
    session break), `roll`: a roll announced to the next contract (raw symbol) and its ratio.
    `unconfirmed`: the prices of the last candidate rejected at its timeout, no bar accepted
    since: evidence for the next candidate, as a next bar is (in a thin market the next bar
    comes after the timeout, and a real move would be rejected bar after bar).
    """

    symbol: str = ""
    last: dict[str, Any] | None = None
    tick: int = 0
    returns: deque[float] = field(default_factory=deque)
    keys: deque[tuple[int, int, int]] = field(default_factory=deque)
    held: Held | None = None
    outage_until: int = 0
    roll: tuple[str, float] | None = None
    unconfirmed: list[int] | None = None

    @property
    def last_ts(self) -> int:
        """ts_event of the latest bar accepted or held; -1 before the first."""
        if self.held is not None:
            return self.held.ts
        return -1 if self.last is None else self.last["ts_event"]

    def prior(self, ts: int, rtype: int) -> int | None:
        """Digest of the accepted or held bar with this key, if still remembered."""
        held = self.held
        if held is not None and held.ts == ts and held.rtype == rtype:
            return held.digest
        for key_ts, key_rtype, digest in reversed(self.keys):
            if key_ts == ts and key_rtype == rtype:
                return digest
            if key_ts < ts:
                return None  # keys are in ts order
        return None

    def to_bytes(self) -> bytes:
        doc = {
            "v": STATE_VERSION,
            "symbol": self.symbol,
            "last": self.last,
            "tick": self.tick,
            "returns": list(self.returns),
            "keys": list(self.keys),
            "held": None if self.held is None else _held_doc(self.held),
            "outage": self.outage_until,
            "roll": self.roll,
            "unconfirmed": self.unconfirmed,
        }
        try:
            return orjson.dumps(doc)
        except TypeError as exc:
            raise ValueError(
                f"corrections state of {self.symbol!r} holds a value orjson cannot encode ({exc});"
                " bars and refs given to correct() must be JSON-serializable"
            ) from exc

    @classmethod
    def from_bytes(cls, data: bytes) -> SymbolState:
        try:
            doc = orjson.loads(data)
            version = doc.get("v")
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise ValueError(f"corrections state is not a SymbolState document: {exc}") from exc
        if version != STATE_VERSION:
            raise ValueError(
                f"corrections state has version {version!r}, this barcast reads "
                f"{STATE_VERSION}; {START_AFRESH}"
            )
        try:
            held = doc["held"]
            return cls(
                symbol=doc["symbol"],
                last=doc["last"],
                tick=doc["tick"],
                returns=deque(doc["returns"]),
                keys=deque(tuple(key) for key in doc["keys"]),
                held=None if held is None else _held_from_doc(held),
                outage_until=doc.get("outage", 0),  # absent: written before outages
                roll=None if doc.get("roll") is None else tuple(doc["roll"]),
                unconfirmed=doc.get("unconfirmed"),  # absent: written before it was kept
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"corrections state is damaged ({exc!r}); {START_AFRESH}") from exc


def _held_doc(held: Held) -> dict[str, Any]:
    value = held.value
    if isinstance(value, Mapping):
        kind, raw = "dict", dict(value)
    elif isinstance(value, str):
        kind, raw = "str", value
    else:  # bytes-like that decoded as JSON, hence valid UTF-8
        kind, raw = "bytes", bytes(value).decode()
    return {
        "kind": kind,
        "value": raw,
        "ref": held.ref,
        "bar": held.bar,
        "changes": [change.as_list() for change in held.changes],
        "moves": [list(move) for move in held.moves],
        "key": [held.ts, held.rtype, held.digest],
    }


def _held_from_doc(doc: dict[str, Any]) -> Held:
    value = doc["value"].encode() if doc["kind"] == "bytes" else doc["value"]
    ts, rtype, digest = doc["key"]
    return Held(
        value=value,
        ref=doc["ref"],
        bar=doc["bar"],
        changes=tuple(Change(Rule(r), f, old, new) for r, f, old, new in doc["changes"]),
        moves=tuple(Move(*move) for move in doc["moves"]),
        ts=ts,
        rtype=rtype,
        digest=digest,
    )
