"""streams.internals: the fetch loop's use of Faust's consumer (streams.consumer) fails loudly,
naming the versions, when an upgrade moved what it uses; the installed Faust has it."""

from __future__ import annotations

from importlib.metadata import version
from types import SimpleNamespace

import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.internals import DRAIN, InternalsMoved, check_drain_internals


@pytest.mark.parametrize("missing", DRAIN)
def test_a_consumer_without_the_fetch_loops_internals_fails_naming_the_versions(
    missing: str,
) -> None:
    consumer = SimpleNamespace(**{name: None for name in DRAIN if name != missing})
    with pytest.raises(InternalsMoved) as error:
        check_drain_internals(consumer)
    message = str(error.value)
    assert missing in message and "streams.internals.DRAIN" in message
    assert f"faust-streaming {version('faust-streaming')}" in message
    assert f"aiokafka {version('aiokafka')}" in message
    check_drain_internals(SimpleNamespace(**dict.fromkeys(DRAIN)))  # all there: no error


def test_the_installed_faust_consumer_gives_gaps_where_the_fetch_loop_tells_them() -> None:
    """`_add_gap` is a method of Faust's consumer class; `_read_offset`, set per instance, is
    checked as each worker's consumer starts."""
    assert callable(getattr(faust_aiokafka.Consumer, "_add_gap", None))
