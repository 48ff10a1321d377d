"""How a `BARCAST_*` variable's text becomes a setting's value (and back, for a child
process's environment), and the errors that name a malformed one and its fix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PREFIX = "BARCAST_"


class SettingError(ValueError):
    """A `BARCAST_*` variable holds a value barcast cannot use."""


BROKER_FORMS = (
    "`embedded`, `host:port[,host:port...]`, `kafka://host:port[,host:port...]` "
    "or `kafka://host:port;host:port`"
)
FAUST_SCHEME = "kafka://"


def broker_list(value: str) -> list[str]:
    """`host:port` of each server in a `BARCAST_BROKER` value, written as Kafka clients do or
    as Faust does (a `kafka://` scheme, `,` or `;` between servers)."""
    servers = []
    for part in value.replace(";", ",").split(","):
        server = part.strip().removeprefix(FAUST_SCHEME)
        host, colon, port = server.rpartition(":")
        if not (colon and host and "/" not in server and port.isdigit() and 0 < int(port) < 65536):
            raise SettingError(
                f"{PREFIX}BROKER={value!r}: {part.strip()!r} is not host:port; use {BROKER_FORMS}"
            )
        servers.append(f"{host}:{port}")
    return servers


def number(value: float) -> str:
    """`value` as a person writes it: 60, not 60.0 or 6e+01."""
    return str(int(value)) if float(value).is_integer() else str(value)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse(name: str, type_name: Any, raw: str) -> Any:
    var = PREFIX + name.upper()
    kind = type_name if isinstance(type_name, str) else type_name.__name__
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise SettingError(f"{var}={raw!r} is not a number; set it to e.g. 10") from None
    if kind == "bool":
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SettingError(f"{var}={raw!r} is not a boolean; use true or false")
    if kind == "Path":
        # Absolute, but symlinks kept: the path a user set is the path barcast reports.
        return Path(os.path.abspath(Path(raw).expanduser()))
    return raw
