"""Read what a worker made of a replay back from the topics, until every replayed bar is
accounted for and every forecast the worker owes has arrived: counts observed on the topics,
never a sleep.

A bar read from `bars.raw` is accounted for once `bars.clean` holds its (symbol, ts_event) or
`bars.dlq` holds a dead letter naming its partition and offset (a repeated bar is accounted for
by its first copy's clean bar). The forecasts owed follow from the clean bars by the worker's
own window rule (model.serving.offline.window_requests), the scores owed by its label rule
(model.serving.scoring.score_offline), each over a symbol's bars between its expiries (an
EXPIRED record on `bars.clean`): after one the worker starts the symbol anew.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from tqdm import tqdm

from features.bars import ControlKind, is_control
from model.serving.offline import SymbolBars, window_requests
from model.serving.scoring import score_offline
from streams.kafka import confluent_config
from streams.schema import DLQ_OFFSET, DLQ_PARTITION, DLQ_TOPIC
from streams.settings import Settings

Key = tuple[str, int]  # (symbol, ts_event)
# Fields of a forecast that describe its delivery (which micro-batch, how late), not the
# forecast: left out so that two runs give the same report.
DELIVERY_FIELDS = ("batch_size", "latency_ms")


class BacktestFailed(RuntimeError):
    """The run failed (its replay, its worker, or what the worker published); the message
    says where to look."""


class CollectError(BacktestFailed):
    """The worker stopped publishing before every replayed bar was accounted for."""


@dataclass
class Collected:
    raw: dict[tuple[int, int], Key] = field(default_factory=dict)  # (partition, offset) -> key
    clean: dict[Key, dict[str, Any]] = field(default_factory=dict)
    dead_letters: set[tuple[int, int]] = field(default_factory=set)  # raw (partition, offset)
    forecasts: dict[Key, dict[str, Any]] = field(default_factory=dict)
    scores: dict[Key, dict[str, Any]] = field(default_factory=dict)
    expiries: dict[str, set[int]] = field(default_factory=dict)  # symbol -> each one's last_ts

    def unaccounted(self) -> list[tuple[int, int]]:
        return [
            ref
            for ref, key in self.raw.items()
            if key not in self.clean and ref not in self.dead_letters
        ]

    def clean_by_symbol(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for key in sorted(self.clean):
            out.setdefault(key[0], []).append(self.clean[key])
        return out

    def lives(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """Each symbol's clean bars in order, cut after the last bar of each of its expiries:
        the worker's states of a symbol live from its first bar, or an expiry, to the next."""
        out = []
        for symbol, bars in self.clean_by_symbol().items():
            ts = [bar["ts_event"] for bar in bars]
            cuts = [bisect_right(ts, last) for last in sorted(self.expiries.get(symbol, ()))]
            out += [(symbol, bars[lo:hi]) for lo, hi in pairwise([0, *cuts, len(bars)]) if hi > lo]
        return out


class TopicReader:
    """One plain consumer over every partition of the raw, clean, dead-letter and forecast
    topics, from the beginning."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.consumer = Consumer(
            confluent_config(
                settings, **{"group.id": f"{settings.app_id}-reader", "enable.auto.commit": False}
            )
        )
        topics = (
            settings.topic_raw,
            settings.topic_clean,
            settings.topic_dlq,
            settings.topic_forecasts,
            settings.topic_scores,
        )
        self.consumer.assign(
            [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for topic in topics
                for p in range(settings.partitions)
            ]
        )

    def read_into(self, collected: Collected) -> int:
        """Add what arrived to `collected`; returns how many messages that was."""
        messages = [m for m in self.consumer.consume(10_000, timeout=0.2) if not m.error()]
        for message in messages:
            self._add(collected, message)
        return len(messages)

    def _add(self, collected: Collected, message: Any) -> None:
        topic, s = message.topic(), self.settings
        if topic == s.topic_dlq:
            headers = dict(message.headers() or [])
            if headers.get(DLQ_TOPIC, b"").decode() == s.topic_raw:
                collected.dead_letters.add((int(headers[DLQ_PARTITION]), int(headers[DLQ_OFFSET])))
            return
        value = orjson.loads(message.value())
        if is_control(value):
            if topic == s.topic_clean and value["control"] == ControlKind.EXPIRED:
                collected.expiries.setdefault(value["symbol"], set()).add(value["last_ts"])
            return
        key = (value["symbol"], int(value["ts_event"]))
        if topic == s.topic_raw:
            collected.raw[(message.partition(), message.offset())] = key
        elif topic == s.topic_clean:
            collected.clean.setdefault(key, value)
        elif topic == s.topic_scores:
            collected.scores.setdefault(key, value)
        else:
            for name in DELIVERY_FIELDS:
                value.pop(name, None)
            collected.forecasts.setdefault(key, value)

    def close(self) -> None:
        self.consumer.close()


def owed_forecasts(collected: Collected, lookback: int) -> set[Key]:
    """Every (symbol, ts_event) the worker forecasts from these clean bars (which ones does not
    depend on prices, so a roll's, which scales them, is left out)."""
    return {
        (symbol, request.ts_event)
        for symbol, bars in collected.lives()
        for request in window_requests(symbol, SymbolBars(bars), lookback)
    }


def owed_scores(collected: Collected) -> set[Key]:
    """Every (symbol, ts_event) of a forecast whose label these clean bars decide, each
    forecast's by the bars of its symbol's life."""
    forecasts: dict[str, list[dict[str, Any]]] = {}
    for (symbol, _), forecast in sorted(collected.forecasts.items()):
        forecasts.setdefault(symbol, []).append(forecast)
    owed: set[Key] = set()
    for symbol, bars in collected.lives():
        mine = forecasts.get(symbol, [])
        ts = [f["ts_event"] for f in mine]
        lo, hi = bisect_left(ts, bars[0]["ts_event"]), bisect_right(ts, bars[-1]["ts_event"])
        owed |= set(score_offline(mine[lo:hi], bars))
    return owed


def collect(
    settings: Settings,
    replayed: int,
    lookback: int,
    check_worker: Callable[[], None],
    idle_timeout_s: float,
) -> Collected:
    """Read until the `replayed` raw bars are accounted for, their forecasts are in and the
    scores of those the bars decide (with online scoring).
    `check_worker` raises when the worker died; nothing new for `idle_timeout_s` fails."""
    collected, reader = Collected(), TopicReader(settings)
    try:
        with tqdm(total=replayed, desc="bars accounted", unit="bar", disable=None) as bar:
            wait_for(
                reader,
                collected,
                lambda: replayed - len(collected.raw) + len(collected.unaccounted()),
                bar,
                check_worker,
                idle_timeout_s,
            )
        owed = owed_forecasts(collected, lookback)
        with tqdm(total=len(owed), desc="forecasts", unit="fc", disable=None) as bar:
            wait_for(
                reader,
                collected,
                lambda: len(owed - collected.forecasts.keys()),
                bar,
                check_worker,
                idle_timeout_s,
            )
        decided = owed_scores(collected) if settings.online_scoring else set()
        with tqdm(total=len(decided), desc="scores", unit="score", disable=None) as bar:
            missing = lambda: len(decided - collected.scores.keys())  # noqa: E731
            wait_for(reader, collected, missing, bar, check_worker, idle_timeout_s)
    finally:
        reader.close()
    return collected


def wait_for(
    reader: TopicReader,
    collected: Collected,
    missing: Callable[[], int],
    bar: tqdm,
    check_worker: Callable[[], None],
    idle_timeout_s: float,
) -> None:
    last_progress = time.monotonic()
    left = missing()
    while left > 0:
        if reader.read_into(collected):
            last_progress = time.monotonic()
            left = missing()
            bar.update(bar.total - left - bar.n)
            continue
        check_worker()
        if time.monotonic() - last_progress > idle_timeout_s:
            raise CollectError(
                f"{left} still missing ({bar.desc}) after {idle_timeout_s:.0f} s without "
                f"progress on {reader.settings.topic_clean}, {reader.settings.topic_dlq} and "
                f"{reader.settings.topic_forecasts}; see the worker's log"
            )
