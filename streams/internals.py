"""The private Faust and aiokafka attributes barcast relies on, each reached through a check
that fails loudly, naming the installed versions, when an upgrade moved it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class InternalsMoved(RuntimeError):
    """A private attribute of Faust or aiokafka that barcast relies on is gone."""


# Faust's consumer → its consumer thread → aiokafka's AIOKafkaConsumer → its Fetcher, and the
# fetcher's attribute holding the wait.
FETCHER_PATH = ("_thread", "_consumer", "_fetcher")
FETCH_WAIT = "_fetch_max_wait_ms"
# Faust's consumer's committed offsets (last processed + 1) by TP, which it keeps only here.
COMMITTED = "_committed_offset"
# What barcast's fetch loop (streams.consumer) uses of Faust's: each partition's read offset,
# and how offsets without a record are told to its commits.
DRAIN = ("_read_offset", "_add_gap")
# What the worker's table manager (streams.faust_app.Tables) starts of Faust's own.
TABLES_START = ("_update_channels", "recovery")


def live_fetcher(consumer: Any) -> Any:
    """aiokafka's Fetcher under a running Faust consumer; InternalsMoved (naming the installed
    versions) if the path to it or its fetch-wait attribute no longer exists."""
    node = consumer
    for depth, name in enumerate(FETCHER_PATH):
        node = getattr(node, name, None)
        if node is None:
            raise InternalsMoved(_moved(".".join(FETCHER_PATH[: depth + 1]), *_FETCH_USE))
    if not isinstance(getattr(node, FETCH_WAIT, None), int):
        raise InternalsMoved(_moved(".".join((*FETCHER_PATH, FETCH_WAIT)), *_FETCH_USE))
    return node


_FETCH_USE = ("sets the fetch wait", "FETCHER_PATH")


def committed_offsets(consumer: Any) -> Mapping[Any, int | None]:
    """The committed offset of each partition a Faust consumer has committed (the metrics'
    consumer lag); InternalsMoved (naming the installed versions) if it no longer keeps them
    where barcast reads them."""
    offsets = getattr(consumer, COMMITTED, None)
    if not isinstance(offsets, Mapping):
        raise InternalsMoved(_moved(COMMITTED, "reads the committed offsets", "COMMITTED"))
    return offsets


def check_drain_internals(consumer: Any) -> None:
    """InternalsMoved (naming the installed versions) if a Faust consumer lacks what barcast's
    fetch loop uses of it."""
    for name in DRAIN:
        if not hasattr(consumer, name):
            raise InternalsMoved(_moved(name, "passes fetched records on in batches", "DRAIN"))


def check_table_internals(manager: Any) -> None:
    """InternalsMoved (naming the installed versions) if a Faust table manager lacks what
    barcast's starts of it."""
    for name in TABLES_START:
        if not hasattr(manager, name):
            use = "starts the table manager without its pause"
            raise InternalsMoved(_moved(name, use, "TABLES_START", "table manager"))


def _moved(path: str, use: str, constant: str, owner: str = "consumer") -> str:
    """The message for a moved `path` of Faust's `owner`: what barcast `use`s it for, and the
    `constant` of this module that names it."""
    from importlib.metadata import version

    return (
        f"Faust's {owner} has no {path} (faust-streaming {version('faust-streaming')}, "
        f"aiokafka {version('aiokafka')}): barcast {use} there; update "
        f"streams.internals.{constant} for these versions or pin the ones in pyproject.toml"
    )
