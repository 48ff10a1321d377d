"""barcast's Kafka and Faust side: `faust -A streams worker` finds `streams.app`, created in
`streams.worker` (a submodule named `app` would shadow the attribute).

The app is created on first access only, so the modules in this package that need no Faust
(settings, schema, the runtime, the tools) import without creating it.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from streams.worker import app

        return app
    raise AttributeError(f"module 'streams' has no attribute {name!r}")
