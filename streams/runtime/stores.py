"""Stores: the worker's state (corrections states, feature states, forecast windows, a stream
encoder's streams) in memory, made durable in a changelog topic the runtime owns
(streams.runtime.changelog), not a Faust table (the contract: streams.runtime). The changelog
partition is the source partition: a store is co-partitioned with its topic.

A store's key evicted (a symbol expired) leaves a record of no state: a tombstone under each
of the keys its state is stored under but its own (streams.runtime.changelog), and under its
own `GONE` and the symbol's last bar time, which the store keeps (`gone`): a stage takes a
record of the symbol at or before it for a repeat an upstream restart re-published, not a new
symbol's first. No store's state encodes to either (a commit's marks are empty, and are no
store's: streams.runtime.commit)."""

from __future__ import annotations

import logging
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Generic, TypeVar

import torch

from model.serving.shadow import SymbolShadow
from model.serving.skill import SkillWindow
from model.serving.streaming import SymbolStream, heads_bytes, heads_from_bytes
from model.serving.windows import SymbolWindow, meta_key, meta_layout, slot_key
from streams.runtime.changelog import Changelog

log = logging.getLogger("barcast.runtime")

S = TypeVar("S")
GONE = b"\x00barcast-expired\x00"  # + the expired symbol's last bar time
_TS = struct.Struct("<q")
Streams = dict[str, SymbolStream]  # a symbol's streams by model id


class StoreName(StrEnum):
    """The worker's stores, each kept in changelog topic `<group>-<name>-changelog`. A
    persistence contract: a store renamed would restore nothing of what its topic holds."""

    CORRECTIONS = "corrections-state"
    FEATURES = "features-state"
    SCORING = "scoring-state"
    CALIBRATION = "calibration-state"
    FORECAST_WINDOWS = "forecast-window-slots"
    SHADOW = "shadow-state"
    CANARY = "canary-state"
    STREAMS = "encoder-streams"


def marks_name(topic: str) -> str:
    """The store of source topic `topic`'s marks (streams.runtime.commit), as contracted."""
    return f"{topic}-checkpoints"


class Store(ABC, Generic[S]):
    """A store's decoded states and the keys changed since its last flush, which the runtime
    flushes, restores by partition and forgets; each kind reads and encodes states its own way."""

    def __init__(self, changelog: Changelog) -> None:
        self.changelog = changelog
        self.states: dict[bytes, S] = {}
        self.changed: dict[bytes, tuple[int, int]] = {}  # key -> source partition, offset
        self.flushed: dict[bytes, Any] = {}  # of a state stored in parts: its last flush's
        self.gone: dict[bytes, int] = {}  # expired key -> its symbol's last bar time

    def write(self, key: bytes, partition: int, offset: int, state: S) -> None:
        self.states[key] = state
        self.changed[key] = (partition, offset)

    def put_changed(self) -> None:
        """The keys changed since, into the changelog's records to flush next."""
        changed, self.changed = self.changed, {}
        for key in sorted(changed):
            self._put(key, *changed[key])

    async def restore(self, partition: int, boundary: int) -> None:
        """The partition's entries as of source offset `boundary`; a key whose entry is a
        deletion (`evict`) has none, and its symbol's last bar time if it expired."""
        entries = self.changelog.entries
        for key in await self.changelog.restore(partition, boundary):
            payload = entries[key][2]
            if payload.startswith(GONE):
                self.gone[key] = _TS.unpack_from(payload, len(GONE))[0]
            if not payload or payload.startswith(GONE):  # a deletion: no state
                del entries[key]

    def forget(self) -> None:
        self.states.clear()
        self.changed.clear()
        self.flushed.clear()
        self.gone.clear()
        self.changelog.entries.clear()

    def evict(self, key: bytes, partition: int, offset: int, last_ts: int | None) -> None:
        """Drop `key`'s state (its symbol, last bar at `last_ts`, expired at source `offset`;
        None: a key of no bar, or a store whose stage reads no note), in memory and in the
        changelog: a key read after it starts anew, after a restart too."""
        self.states.pop(key, None)
        self.changed.pop(key, None)
        self.flushed.pop(key, None)
        for entry in self._entry_keys(key):
            if entry != key:
                self.changelog.delete(entry, partition, offset)
        if last_ts is not None:  # a later expiry's, whatever order re-sent records come in
            self.gone[key] = max(last_ts, self.gone.get(key, last_ts))
        gone = self.gone.get(key)
        self.changelog.delete(
            key, partition, offset, b"" if gone is None else GONE + _TS.pack(gone)
        )

    def _entry_keys(self, key: bytes) -> list[bytes]:
        """The changelog keys `key`'s state may be stored under (in parts: each part's)."""
        return [key]

    @abstractmethod
    def _put(self, key: bytes, partition: int, offset: int) -> None:
        """The changed key's entries into the changelog."""


class StateStore(Store[S]):
    def __init__(
        self,
        changelog: Changelog,
        decode: Callable[[bytes], S],
        encode: Callable[[S], bytes],
        new: Callable[[], S],
    ) -> None:
        super().__init__(changelog)
        self.decode, self.encode, self.new = decode, encode, new

    def read(self, key: bytes) -> S:
        """The key's state: in memory, else decoded from its restored entry, else new."""
        state = self.states.get(key)
        if state is None:
            entry = self.changelog.entries.get(key)
            state = self.states[key] = self.new() if entry is None else self.decode(entry[2])
        return state

    def keys_in(self, partition: int) -> list[bytes]:
        """Keys with state from source partition `partition`, stored or changed since, sorted:
        a restore rebuilds the entries in another order than they were written."""
        keys = {key for key, entry in self.changelog.entries.items() if entry[0] == partition}
        keys.update(key for key, (p, _) in self.changed.items() if p == partition)
        return sorted(keys)

    def _put(self, key: bytes, partition: int, offset: int) -> None:
        self.changelog.put(key, partition, offset, self.encode(self.states[key]))


class WindowStore(Store[SymbolWindow]):
    """Per-symbol forecast windows, stored slot by slot: a new bar writes its slot and the
    window's row count, not the whole window. A stored window of a feature set other than
    `fingerprint` (written before an upgrade changed the features) starts empty instead: its
    rows and the new ones would mix in one forecast's input. So does one of another lookback (a
    checkpoint trained with another `--lookback`): its rows sit in other slots."""

    def __init__(
        self, changelog: Changelog, lookback: int, n_features: int, fingerprint: str
    ) -> None:
        super().__init__(changelog)
        self.lookback, self.n_features, self.fingerprint = lookback, n_features, fingerprint
        self.flushed: dict[bytes, int]  # key -> row count at its last flush

    def read(self, key: bytes) -> SymbolWindow:
        """The key's window: in memory, else rebuilt from its restored slots, else empty."""
        window = self.states.get(key)
        if window is None:
            window = self.states[key] = SymbolWindow(self.lookback, self.n_features)
            entries = self.changelog.entries
            meta = entries.get(meta_key(key))
            if meta is not None and self._of_this_layout(key, meta[2]):
                window.load_meta(meta[2])
                for row in window.rows():
                    slot = window.slot_of(row)
                    window.load_slot(slot, entries[slot_key(key, slot)][2])
            self.flushed[key] = window.count
        return window

    def _of_this_layout(self, key: bytes, meta: bytes) -> bool:
        fingerprint, lookback = meta_layout(meta)
        if fingerprint != self.fingerprint:
            log.warning(
                "the stored forecast window of %r holds rows of feature set %s, this worker's "
                "is %s: it starts empty, and the symbol is forecast again once %d new rows "
                "fill it", key, fingerprint or "(unrecorded)", self.fingerprint, self.lookback,
            )  # fmt: skip
            return False
        # A meta stored before windows said their lookback: the slots it left tell.
        fits = self._fits(key, meta) if lookback is None else lookback == self.lookback
        if not fits:
            log.warning(
                "the stored forecast window of %r was stored with a lookback of %s, this "
                "worker's model looks back %d: it starts empty, and the symbol is forecast "
                "again once %d new rows fill it",
                key, lookback or "another", self.lookback, self.lookback,
            )  # fmt: skip
        return fits

    def _fits(self, key: bytes, meta: bytes) -> bool:
        """Whether an older meta's window has every slot this lookback reads and none beyond."""
        probe = SymbolWindow(self.lookback, 0)
        probe.load_meta(meta)
        entries = self.changelog.entries
        slots = {probe.slot_of(row) for row in probe.rows()}
        return slot_key(key, self.lookback) not in entries and all(
            slot_key(key, slot) in entries for slot in slots
        )

    def _entry_keys(self, key: bytes) -> list[bytes]:
        slots = [slot_key(key, slot) for slot in range(self.lookback)]
        return [meta_key(key), *slots, *slots_beyond(self.changelog, key, self.lookback)]

    def _put(self, key: bytes, partition: int, offset: int) -> None:
        """The slots of rows appended since the last flush, then the row count; slots beyond
        the lookback (a longer one's) deleted."""
        window, put = self.states[key], self.changelog.put
        for gone in slots_beyond(self.changelog, key, self.lookback):
            self.changelog.delete(gone, partition, offset)
        for row in range(max(self.flushed[key] + 1, window.rows().start), window.count + 1):
            slot = window.slot_of(row)
            put(slot_key(key, slot), partition, offset, window.slot_bytes(slot))
        put(meta_key(key), partition, offset, window.meta_bytes(self.fingerprint))
        self.flushed[key] = window.count


class ShadowStore(StateStore[SymbolShadow]):
    """Per-symbol shadow states (model.serving.shadow), each one's skill window stored slot by
    slot under keys of its own: a scored forecast writes its slot and the state, not the
    whole window (`window_size` forecasts x horizons x tracks). A window stored with another
    size (BARCAST_SCORE_WINDOW changed) keeps its newest forecasts that fit."""

    def __init__(self, changelog: Changelog, window_size: int) -> None:
        super().__init__(
            changelog, SymbolShadow.from_bytes, SymbolShadow.to_bytes,
            lambda: SymbolShadow(window_size),
        )  # fmt: skip
        self.window_size = window_size
        # key -> its skill window and that window's rows at its last flush: a window replaced
        # since (another checkpoint's baselines start afresh; another size) is written whole
        self.flushed: dict[bytes, tuple[SkillWindow, int]]
        # Each symbol's key -> the source partition of its stored state: its window's slots
        # outnumber the symbols by the window's size, and a canary's verdict looks for a
        # partition's symbols at every event minute
        self.partitions: dict[bytes, int] = {}

    def read(self, key: bytes) -> SymbolShadow:
        state = self.states.get(key)
        if state is not None:
            return state
        entry = self.changelog.entries.get(key)
        if entry is None:
            state = self.new()
        else:
            state = self.decode(entry[2])
            window, entries = state.window, self.changelog.entries
            horizons = window.losses.shape[1]
            for row in window.rows():
                slot = window.slot_of(row)
                window.load_slot(slot, entries[slot_key(key, slot)][2], horizons)
        self.flushed[key] = state.window, state.window.count
        if state.window_size != self.window_size:
            state.resize(self.window_size)  # every slot again, in the new size's places
        self.states[key] = state
        return state

    def symbols_in(self, partition: int) -> list[bytes]:
        """Keys of symbols' states from source partition `partition`: stored or changed since."""
        keys = [key for key, p in self.partitions.items() if p == partition]
        keys += [key for key, (p, _) in self.changed.items() if p == partition]
        return list(dict.fromkeys(keys))

    async def restore(self, partition: int, boundary: int) -> None:
        await super().restore(partition, boundary)
        for key, entry in self.changelog.entries.items():
            if b"\x00" not in key:
                self.partitions[key] = entry[0]

    def forget(self) -> None:
        super().forget()
        self.partitions.clear()

    def evict(self, key: bytes, partition: int, offset: int, last_ts: int | None) -> None:
        super().evict(key, partition, offset, last_ts)
        self.partitions.pop(key, None)

    def _entry_keys(self, key: bytes) -> list[bytes]:
        slots = [slot_key(key, slot) for slot in range(self.window_size)]
        return [key, *slots, *slots_beyond(self.changelog, key, self.window_size)]

    def _put(self, key: bytes, partition: int, offset: int) -> None:
        """The slots of forecasts scored since the last flush, then the state; slots beyond
        the window (a larger one's) deleted."""
        state, put = self.states[key], self.changelog.put
        for gone in slots_beyond(self.changelog, key, self.window_size):
            self.changelog.delete(gone, partition, offset)
        window = state.window
        flushed, count = self.flushed.get(key, (None, 0))
        start = count if flushed is window else 0
        for row in range(max(start, window.rows().start), window.count):
            slot = window.slot_of(row)
            put(slot_key(key, slot), partition, offset, window.slot_bytes(slot))
        put(key, partition, offset, self.encode(state))
        self.flushed[key] = window, window.count
        self.partitions[key] = partition


class StreamStore(Store[Streams]):
    """Per-symbol streams of a stream encoder by model id (streams.runtime.stages.carried),
    stored as the windows are: each slot of a stream's ring under a key of its own (symbol,
    place, slot), written when its contents changed since the last flush (a new bar's slot;
    every slot of a stream started again), and the streams' heads under the symbol's key. A
    place is a stream's rank in model id order among its symbol's (the serving checkpoint's and
    a canary's), so a symbol's slots are bounded however many checkpoints have served it."""

    def __init__(self, changelog: Changelog) -> None:
        super().__init__(changelog)
        self.flushed: dict[bytes, Streams]  # key -> its streams at its last flush

    def read(self, key: bytes) -> Streams:
        """The key's streams: in memory, else rebuilt from its restored entries, else none."""
        streams = self.states.get(key)
        if streams is None:
            entries, streams = self.changelog.entries, {}
            for place, (model_id, head) in enumerate(self._stored(key)):
                places = range(SymbolStream.lookback_of(head))
                slots = [entries[_stream_slot_key(key, place, slot)][2] for slot in places]
                streams[model_id] = SymbolStream.from_parts(head, slots, torch.device("cpu"))
            self.states[key] = streams
            self.flushed[key] = dict(streams)
        return streams

    def _stored(self, key: bytes) -> list[tuple[str, bytes]]:
        """The key's stored streams' model ids and heads, in place order."""
        heads = self.changelog.entries.get(key)
        return heads_from_bytes(heads[2] if heads else b"")

    def _entry_keys(self, key: bytes) -> list[bytes]:
        lookbacks = [SymbolStream.lookback_of(head) for _, head in self._stored(key)]
        return [key, *_slot_keys(key, lookbacks)]

    def _put(self, key: bytes, partition: int, offset: int) -> None:
        """The slots changed since the last flush, then the heads; the slots of a place the
        streams no longer fill (a canary's, ended) deleted."""
        streams, put = self.states[key], self.changelog.put
        before, now = sorted(self.flushed.get(key, {}).items()), sorted(streams.items())
        if key not in self.flushed:  # written unread: the stored heads say what was there
            stale = set(self._entry_keys(key)[1:])
        elif _lookbacks(before) != _lookbacks(now):  # a place dropped, or its lookback changed
            stale = set(_slot_keys(key, _lookbacks(before)))
        else:
            stale = set()
        for gone in sorted(stale.difference(_slot_keys(key, _lookbacks(now)))) if stale else ():
            self.changelog.delete(gone, partition, offset)
        for place, (model_id, stream) in enumerate(now):
            prior = (
                before[place][1] if place < len(before) and before[place][0] == model_id else None
            )
            changed = stream.changed_slots(prior)
            for slot, data in zip(changed, stream.slots_bytes(changed), strict=True):
                put(_stream_slot_key(key, place, slot), partition, offset, data)
        put(key, partition, offset, heads_bytes(streams))
        self.flushed[key] = dict(streams)


def slots_beyond(changelog: Changelog, key: bytes, size: int) -> list[bytes]:
    """The stored slots of `key`'s window from slot `size` on: a window stored with a larger
    size (another lookback, another BARCAST_SCORE_WINDOW) left them, and a window's slots are
    written from 0 up."""
    slots: list[bytes] = []
    while (slot := slot_key(key, size + len(slots))) in changelog.entries:
        slots.append(slot)
    return slots


def _lookbacks(streams: list[tuple[str, SymbolStream]]) -> list[int]:
    return [stream.dims.lookback for _, stream in streams]


def _slot_keys(key: bytes, lookbacks: list[int]) -> list[bytes]:
    """The slots' keys of `key`'s streams of these lookbacks, in place order."""
    places = enumerate(lookbacks)
    return [_stream_slot_key(key, place, slot) for place, n in places for slot in range(n)]


def _stream_slot_key(symbol: bytes, place: int, slot: int) -> bytes:
    return symbol + b"\x00" + place.to_bytes(1, "little") + slot.to_bytes(8, "little")
