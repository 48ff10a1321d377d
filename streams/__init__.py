"""barcast's Faust side: `faust -A streams worker` finds `streams.app`, created in
`streams.faust_app` (named so that the submodule never shadows the `app` attribute).

The app is created on first access only, so pure modules in this package (schema, corrections,
settings) import without Faust.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from streams.faust_app import app

        return app
    raise AttributeError(f"module 'streams' has no attribute {name!r}")
