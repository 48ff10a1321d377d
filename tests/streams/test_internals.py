"""streams.internals: the fetch loop's use of Faust's consumer (streams.consumer) fails loudly,
naming the versions, when an upgrade moved what it uses; the installed Faust has it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

import pytest
from faust.tables import TableManager
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.faust_app import Tables, create_app
from streams.internals import (
    DRAIN,
    TABLES_START,
    InternalsMoved,
    check_drain_internals,
    check_table_internals,
)
from streams.settings import Settings

CHECKS = [  # what barcast uses of a Faust object, its check, and the object's name there
    *((missing, DRAIN, check_drain_internals, "consumer") for missing in DRAIN),
    *((missing, TABLES_START, check_table_internals, "table manager") for missing in TABLES_START),
]


@pytest.mark.parametrize(("missing", "names", "check", "owner"), CHECKS)
def test_a_faust_object_without_what_barcast_uses_fails_naming_the_versions(
    missing: str, names: tuple[str, ...], check: Callable[[Any], None], owner: str
) -> None:
    thing = SimpleNamespace(**{name: None for name in names if name != missing})
    with pytest.raises(InternalsMoved) as error:
        check(thing)
    message = str(error.value)
    constant = "DRAIN" if names is DRAIN else "TABLES_START"
    assert f"Faust's {owner} has no {missing}" in message
    assert f"streams.internals.{constant}" in message
    assert f"faust-streaming {version('faust-streaming')}" in message
    assert f"aiokafka {version('aiokafka')}" in message
    check(SimpleNamespace(**dict.fromkeys(names)))  # all there: no error


def test_the_installed_faust_consumer_gives_gaps_where_the_fetch_loop_tells_them() -> None:
    """`_add_gap` is a method of Faust's consumer class; `_read_offset`, set per instance, is
    checked as each worker's consumer starts."""
    assert callable(getattr(faust_aiokafka.Consumer, "_add_gap", None))


def test_the_workers_table_manager_starts_recovery_without_fausts_pause() -> None:
    """Faust's TableManager.on_start sleeps a second first; the worker's starts at once."""
    assert all(hasattr(TableManager, name) for name in TABLES_START)
    app = create_app(Settings.from_env())
    tables = app.tables
    assert isinstance(tables, Tables)
    started: list[str] = []

    async def pause(*_: object) -> None:
        raise AssertionError("the table manager paused before starting recovery")

    async def update_channels() -> None:
        started.append("channels")

    async def start_recovery() -> None:
        started.append("recovery")

    tables.sleep = pause  # type: ignore[method-assign]
    tables._update_channels = update_channels  # type: ignore[method-assign]
    tables.recovery.start = start_recovery  # type: ignore[method-assign]
    asyncio.run(tables.on_start())
    assert started == ["channels", "recovery"]
