"""The worker `faust -A streams worker` runs (`streams.app`): the app of this process's settings,
with the live page on its web port and the agents of its role attached."""

from __future__ import annotations

import sys

from streams.agents import register_agents
from streams.exit_codes import ExitCode
from streams.faust_app import create_app
from streams.settings import SettingError, Settings
from streams.web.routes import install as install_live_page


def settings_or_exit() -> Settings:
    """The worker's settings; a bad `BARCAST_*` value ends it with exit 2 and one line, as
    the `barcast` commands do, and a name that is no setting is said."""
    try:
        settings = Settings.from_env()
    except SettingError as exc:
        print(f"barcast worker: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.USAGE) from None
    for name in Settings.unknown():  # before logging is set up, as the error above
        print(f"barcast worker: {name} is no setting (a typo?): ignored", file=sys.stderr)
    return settings


app = create_app(settings_or_exit())
install_live_page(app)  # the live page on `/`, fed through app.observers
register_agents(app)
