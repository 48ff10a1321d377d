"""The private Faust and aiokafka attributes barcast relies on, each reached through a check
that fails loudly, naming the installed versions, when an upgrade moved it."""

from __future__ import annotations

from typing import Any


class InternalsMoved(RuntimeError):
    """A private attribute of Faust or aiokafka that barcast relies on is gone."""


# Faust's consumer → its consumer thread → aiokafka's AIOKafkaConsumer → its Fetcher, and the
# fetcher's attribute holding the wait.
FETCHER_PATH = ("_thread", "_consumer", "_fetcher")
FETCH_WAIT = "_fetch_max_wait_ms"


def live_fetcher(consumer: Any) -> Any:
    """aiokafka's Fetcher under a running Faust consumer; InternalsMoved (naming the installed
    versions) if the path to it or its fetch-wait attribute no longer exists."""
    node = consumer
    for depth, name in enumerate(FETCHER_PATH):
        node = getattr(node, name, None)
        if node is None:
            raise InternalsMoved(_moved(".".join(FETCHER_PATH[: depth + 1])))
    if not isinstance(getattr(node, FETCH_WAIT, None), int):
        raise InternalsMoved(_moved(".".join((*FETCHER_PATH, FETCH_WAIT))))
    return node


def _moved(path: str) -> str:
    from importlib.metadata import version

    return (
        f"Faust's consumer has no {path} (faust-streaming {version('faust-streaming')}, "
        f"aiokafka {version('aiokafka')}): barcast sets the fetch wait there; update "
        "streams.internals.FETCHER_PATH for these versions or pin the ones in pyproject.toml"
    )
