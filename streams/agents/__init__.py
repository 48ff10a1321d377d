"""Agents attached to the app according to `BARCAST_ROLE`.

`all` runs the whole pipeline in one worker, as one agent (streams.agents.pipeline); `stream`
(corrections + features) and `forecast` split it into two worker groups; `corrections` runs
that stage alone, and `passthrough` copies raw bars to the clean topic untouched, the anchor
the corrections benchmark compares against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streams.faust_app import BarcastApp


def register_agents(app: BarcastApp) -> None:
    role = app.barcast.role
    if role == "passthrough":
        from streams.agents import passthrough

        passthrough.register(app)
        return
    if role == "corrections":
        from streams.agents import corrections

        corrections.register(app)
        return
    if role == "all":
        from streams.agents import pipeline

        pipeline.register(app)
        return
    if role == "stream":
        from streams.agents import corrections, features

        corrections.register(app)
        features.register(app)
        return
    if role == "forecast":
        from streams.agents import forecast

        forecast.register(app)
