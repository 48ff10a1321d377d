"""Every barcast setting, read from `BARCAST_*` environment variables in one place.

`FIELDS` is the single source of truth: the table in docs/operations.md, the deploy cross-check
test and `Settings.from_env` are all derived from it, so a setting cannot exist in one and not
the other.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from streams.setting_rules import CHOICES, RANGES, REMOVED
from streams.setting_values import (
    PREFIX,
    SettingError,
    broker_list,
    format_value,
    number,
    parse,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
EMBEDDED = "embedded"


@dataclass(frozen=True)
class Settings:
    broker: str = field(
        default=EMBEDDED,
        metadata={
            "doc": "Kafka bootstrap servers: `host:port,...`, Faust's `kafka://host:port,...` "
            "(or `;`-separated), or `embedded` for Tansu."
        },
    )
    embedded_port: int = field(
        default=19092, metadata={"doc": "Loopback port of the embedded broker."}
    )
    app_id: str = field(
        default="barcast",
        metadata={"doc": "Faust app id = consumer group; roles other than `all` append `-ROLE`."},
    )
    role: str = field(
        default="all",
        metadata={
            "doc": "Agents this worker runs: `all`, `stream` (corrections+features), "
            "`corrections` (corrections alone: `bars.raw` to `bars.clean` and `bars.dlq`), "
            "`forecast`, or `passthrough` (benchmark anchor)."
        },
    )
    topic_raw: str = field(default="bars.raw", metadata={"doc": "Raw bars from ingest."})
    topic_clean: str = field(default="bars.clean", metadata={"doc": "Corrected bars."})
    topic_dlq: str = field(default="bars.dlq", metadata={"doc": "Rejected bars (dead letters)."})
    topic_features: str = field(default="features", metadata={"doc": "Feature rows."})
    topic_forecasts: str = field(default="forecasts", metadata={"doc": "Quantile forecasts."})
    topic_scores: str = field(
        default="forecasts.scores",
        metadata={"doc": "One score per forecast once its horizons have passed (or why not)."},
    )
    topic_shadow: str = field(
        default="forecasts.shadow",
        metadata={"doc": "A canary checkpoint's forecasts, beside the serving one's."},
    )
    topic_explain: str = field(
        default="forecasts.explain",
        metadata={"doc": "One explanation per forecast, with `BARCAST_EXPLAIN=true`."},
    )
    partitions: int = field(default=4, metadata={"doc": "Partitions of every barcast topic."})
    replication: int = field(default=1, metadata={"doc": "Replication factor of new topics."})
    data_dir: Path = field(
        default=REPO_ROOT.parent / "shared" / "data",
        metadata={"doc": "Directory of input data (6EH4 CSV, `dbn/`)."},
    )
    firstrate_dir: Path = field(
        default=REPO_ROOT.parent / "shared" / "firstrate",
        metadata={"doc": "Folder of FirstRate day files (`dailydata/`) for the walk-forward."},
    )
    model_dir: Path = field(
        default=REPO_ROOT / "var" / "models",
        metadata={"doc": "Checkpoint directory the forecast worker loads and watches."},
    )
    work_dir: Path = field(
        default=REPO_ROOT / "var",
        metadata={"doc": "Scratch space: broker logs, converted DBN files, table data."},
    )
    device: str = field(default="auto", metadata={"doc": "`auto`, `cpu` or `cuda`."})
    max_batch: int = field(default=256, metadata={"doc": "Micro-batch size cap."})
    max_delay_ms: float = field(default=5.0, metadata={"doc": "Micro-batch max wait (ms)."})
    inference_threads: int = field(
        default=1,
        metadata={
            "doc": "Threads that run a micro-batch's model chunks side by side on CPU (each "
            "chunk on one core, so forecasts are the same whatever this is); at most the cores "
            "the worker may use less one, which the event loop keeps."
        },
    )
    incremental_encoding: bool = field(
        default=True,
        metadata={"doc": "Cache per-bar encodings and encode only each window's new bar."},
    )
    fill_gaps: bool = field(
        default=True, metadata={"doc": "Fill missing minutes with flagged synthetic bars."}
    )
    expire_days: float = field(
        default=14.0,
        metadata={
            "doc": "Drop a symbol's states once its partition's bars are this many days past its "
            "last (its contract expired, or it stopped trading): an `expired` record on "
            "`bars.clean` and `features` says so, and a later bar starts anew. 0: keep them all."
        },
    )
    online_scoring: bool = field(
        default=True,
        metadata={
            "doc": "Score each forecast once its horizons' bars are in (`forecasts.scores`, the "
            "coverage and pinball metrics); `false` also needs BARCAST_ONLINE_CALIBRATION=false, "
            "BARCAST_SHADOW_BASELINES=false, BARCAST_SERVE=model and BARCAST_CANARY=off."
        },
    )
    online_calibration: bool = field(
        default=True,
        metadata={
            "doc": "Adjust each symbol's q10/q90 per horizon from its scored forecasts "
            "(online conformal quantile tracking); `false` publishes the checkpoint's quantiles."
        },
    )
    shadow_baselines: bool = field(
        default=True,
        metadata={
            "doc": "Form and score the baselines (the checkpoint's volatility scale alone, the "
            "time-of-day EWMA blend) beside every forecast: their pinball on "
            "`forecasts.scores`, the `barcast_forecast_skill` gauges; needs online scoring."
        },
    )
    serve: str = field(
        default="auto",
        metadata={
            "doc": "What each symbol's published forecasts come from: `model`, `baseline` (the "
            "best baseline's), or `auto`: the model's, the best baseline's while the model's "
            "rolling skill interval lies wholly below zero (every forecast names its `source`)."
        },
    )
    canary: bool = field(
        default=True,
        metadata={
            "doc": "`on`: a new checkpoint first forecasts beside the serving one (a canary, "
            "to `forecasts.shadow`) and serves once it is scored no worse; `off`: it is "
            "swapped in at once. Needs the shadow baselines' scoring."
        },
    )
    canary_forecasts: int = field(
        default=2000,
        metadata={
            "doc": "The canary's scored forecasts, over a partition's symbols, before its "
            "verdict (`barcast promote` forces one)."
        },
    )
    explain: bool = field(
        default=False,
        metadata={
            "doc": "Publish each forecast's explanation (variable-selection weights, attention "
            "summary) on `BARCAST_TOPIC_EXPLAIN`, from the forward pass that made it; a "
            'stream-encoder checkpoint (`TFTConfig.encoder="stream"`) is refused then.'
        },
    )
    explain_top_k: int = field(
        default=10,
        metadata={"doc": "Historical features an explanation names (the top k by weight)."},
    )
    score_window: int = field(
        default=240,
        metadata={
            "doc": "Scored forecasts behind the rolling coverage and pinball metrics (the mean "
            "age of an exponentially weighted mean)."
        },
    )
    checkpoint_min_s: float = field(
        default=0.5,
        metadata={
            "doc": "Shortest a quiet worker holds consumed events before it stores its state and "
            "commits them (s): longer writes fewer changelog records and commits, and a crash "
            "replays more; one over `BARCAST_CHECKPOINT_MAX_S` acts as that."
        },
    )
    checkpoint_max_s: float = field(
        default=2.0,
        metadata={
            "doc": "Longest a busy worker holds consumed events before it stores its state and "
            "commits them (s): the most a crash replays. Otherwise state is stored once the "
            "worker is quiet, between bursts."
        },
    )
    web_port: int = field(default=6066, metadata={"doc": "Faust web port (`/metrics`)."})
    session_timeout_s: float = field(default=10.0, metadata={"doc": "Consumer session timeout."})
    rebalance_timeout_s: float = field(
        default=10.0, metadata={"doc": "Consumer group rebalance timeout."}
    )
    connect_timeout_s: float = field(
        default=10.0, metadata={"doc": "How long CLI commands wait for the broker."}
    )
    fetch_max_wait_ms: int = field(
        default=20,
        metadata={
            "doc": "Longest a consumer fetch waits for data once partitions are assigned (ms); "
            "brokers that hold a fetch this long although data arrived (the embedded Tansu "
            "does) add it to every hop, and a shorter wait costs them more fetches per bar."
        },
    )
    max_record_bytes: int = field(
        default=1_000_000,
        metadata={
            "doc": "Largest record the worker publishes (bytes, at most the brokers' "
            "`message.max.bytes`); a bigger output goes to the DLQ as a bounded copy. The "
            "worker reads records up to 4x this size."
        },
    )
    security_protocol: str = field(
        default="PLAINTEXT",
        metadata={"doc": "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`."},
    )
    sasl_mechanism: str = field(
        default="", metadata={"doc": "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`."}
    )
    sasl_username: str = field(default="", metadata={"doc": "SASL user name."})
    sasl_password: str = field(
        default="",
        repr=False,
        metadata={"doc": "SASL password (never logged).", "secret": True},
    )
    ssl_cafile: str = field(default="", metadata={"doc": "CA bundle for SSL/SASL_SSL."})
    key_by: str = field(
        default="raw",
        metadata={
            "doc": "What ingest keys bars by, so what every state follows: `raw` (the "
            "contract's raw symbol) or `continuous` (the continuous symbol a bar came under, "
            "`ES.c.0`, or `ES.v.0` with `BARCAST_FOLLOW=lead`), whose states carry over a roll."
        },
    )
    follow: str = field(
        default="all",
        metadata={
            "doc": "Ingest of a parent subscription (`ES.FUT`): `all` contracts, or the `lead` "
            "of each product alone, by the previous trading day's volume (`ES.v.0`)."
        },
    )

    @classmethod
    def unknown(cls, env: Mapping[str, str] | None = None) -> list[str]:
        """The `BARCAST_*` names in `env` that are no setting (a typo, most likely), which
        `from_env` passes over."""
        env = os.environ if env is None else env
        known = {*env_names(), *REMOVED}
        return sorted(name for name in env if name.startswith(PREFIX) and name not in known)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        for name, fix in REMOVED.items():
            if env.get(name):
                raise SettingError(f"{name}={env[name]!r} is no longer a setting: {fix}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = parse(f.name, f.type, raw)
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """SettingError naming the setting and the fix for any value barcast cannot run."""
        if not self.embedded:
            broker_list(self.broker)  # raises on a malformed value, naming the accepted forms
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise SettingError(
                    f"{PREFIX}{name.upper()}={value!r} is not valid; use one of {allowed}"
                )
        for name, (low, high, unit) in RANGES.items():
            value = getattr(self, name)
            # a NaN compares false both ways: only a finite value inside the range passes
            finite = not isinstance(value, float) or math.isfinite(value)
            if not (finite and low <= value and (high is None or value <= high)):
                accepted = f"{number(low)} or more"
                if high is not None:
                    accepted = f"{number(low)}-{number(high)}"
                raise SettingError(
                    f"{PREFIX}{name.upper()}={value} is out of range; use {accepted} ({unit})"
                )
        self._validate_scoring()
        if self.ssl_cafile and not Path(self.ssl_cafile).is_file():
            raise SettingError(
                f"{PREFIX}SSL_CAFILE={self.ssl_cafile!r} is not a file; set it to the PEM bundle "
                "of the CA that signed the brokers' certificates"
            )
        if self.security_protocol.startswith("SASL") and not self.sasl_mechanism:
            raise SettingError(
                f"{PREFIX}SECURITY_PROTOCOL={self.security_protocol} needs "
                f"{PREFIX}SASL_MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            )

    def _validate_scoring(self) -> None:
        """What scores the forecasts, and what needs it, all named in one message: scoring off
        needs online calibration, the shadow baselines, the fallback and canaries off."""
        needs_scores = {
            "ONLINE_CALIBRATION=false": self.online_calibration,
            "SHADOW_BASELINES=false": self.shadow_baselines,
        }
        needs_shadows = {"SERVE=model": self.serve != "model", "CANARY=off": self.canary}
        if not self.online_scoring:
            fixes = [f for f, on in (needs_scores | needs_shadows).items() if on]
            if fixes:
                raise SettingError(
                    f"{PREFIX}ONLINE_SCORING=false turns off what online calibration, the shadow "
                    "baselines, the fallback and canaries are made of: also set "
                    + ", ".join(PREFIX + fix for fix in fixes)
                    + f", or {PREFIX}ONLINE_SCORING=true"
                )
        elif not self.shadow_baselines:
            fixes = [f for f, on in needs_shadows.items() if on]
            if fixes:
                raise SettingError(
                    f"{PREFIX}SHADOW_BASELINES=false turns off the scores the fallback "
                    f"({PREFIX}SERVE=auto or baseline) and canaries are decided on: also set "
                    + ", ".join(PREFIX + fix for fix in fixes)
                    + f", or {PREFIX}SHADOW_BASELINES=true"
                )

    def isolated(self, run: str) -> Settings:
        """These settings with a consumer group and topics of their own, named after `run`:
        for a run that must not read, or be read by, any other on the same cluster."""
        topics = ("raw", "clean", "dlq", "features", "forecasts", "scores", "shadow", "explain")
        renamed = {f"topic_{t}": f"{getattr(self, f'topic_{t}')}.{run}" for t in topics}
        return replace(self, app_id=f"barcast-{run}", **renamed)

    @property
    def embedded(self) -> bool:
        return self.broker == EMBEDDED

    @property
    def brokers(self) -> list[str]:
        """`host:port` of each configured bootstrap server (none when embedded)."""
        return [] if self.embedded else broker_list(self.broker)

    def to_env(self) -> dict[str, str]:
        """The `BARCAST_*` variables that reproduce these settings in a child process."""
        return {PREFIX + f.name.upper(): format_value(getattr(self, f.name)) for f in fields(self)}

    def redacted(self) -> dict[str, str]:
        """Settings as strings, safe to log: secrets are masked."""
        return {
            f.name: (
                "***"
                if f.metadata.get("secret") and getattr(self, f.name)
                else str(getattr(self, f.name))
            )
            for f in fields(self)
        }


def env_names() -> list[str]:
    """Every environment variable barcast reads, in declaration order."""
    return [PREFIX + f.name.upper() for f in fields(Settings)]


def markdown_table() -> str:
    """docs/operations.md's settings table, generated so that it cannot drift from the code."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for f in fields(Settings):
        default = f.default
        if isinstance(default, Path):
            default = os.path.relpath(default, REPO_ROOT) + " (from the checkout)"
        shown = format_value(default) or "(empty)"
        rows.append(f"| `{PREFIX}{f.name.upper()}` | `{shown}` | {f.metadata['doc']} |")
    return "\n".join(rows)
