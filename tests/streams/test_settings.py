"""Settings: one place, typed, validated, secrets never shown."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from benchmarks.docs.sections import generated
from streams.kafka import aiokafka_config, bootstrap_servers, confluent_config
from streams.settings import SettingError, Settings, env_names, markdown_table


def test_defaults_match_the_documented_topics() -> None:
    settings = Settings.from_env({})
    assert settings.embedded
    assert (settings.topic_raw, settings.topic_clean, settings.topic_dlq) == (
        "bars.raw",
        "bars.clean",
        "bars.dlq",
    )
    assert (settings.topic_features, settings.topic_forecasts) == ("features", "forecasts")
    assert settings.topic_scores == "forecasts.scores"
    assert settings.online_calibration and settings.score_window == 240
    assert settings.topic_explain == "forecasts.explain"
    assert not settings.explain and settings.explain_top_k == 10


def test_environment_overrides_are_typed() -> None:
    settings = Settings.from_env(
        {
            "BARCAST_BROKER": "k1:9092,k2:9092",
            "BARCAST_PARTITIONS": "12",
            "BARCAST_FILL_GAPS": "false",
            "BARCAST_MAX_DELAY_MS": "2.5",
            "BARCAST_MODEL_DIR": "/srv/models",
        }
    )
    assert settings.broker == "k1:9092,k2:9092" and not settings.embedded
    assert settings.partitions == 12 and settings.fill_gaps is False
    assert settings.max_delay_ms == 2.5 and settings.model_dir == Path("/srv/models")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BARCAST_PARTITIONS": "four"}, "BARCAST_PARTITIONS='four' is not a number"),
        ({"BARCAST_FILL_GAPS": "maybe"}, "BARCAST_FILL_GAPS='maybe' is not a boolean"),
        ({"BARCAST_ROLE": "everything"}, "BARCAST_ROLE='everything' is not valid"),
        ({"BARCAST_SECURITY_PROTOCOL": "SASL_SSL"}, "needs BARCAST_SASL_MECHANISM"),
        ({"BARCAST_FETCH_MAX_WAIT_MS": "0"}, "BARCAST_FETCH_MAX_WAIT_MS=0 is out of range"),
        ({"BARCAST_EXPIRE_DAYS": "nan"}, "BARCAST_EXPIRE_DAYS=nan is out of range"),
        ({"BARCAST_CONNECT_TIMEOUT_S": "inf"}, "BARCAST_CONNECT_TIMEOUT_S=inf is out of range"),
        ({"BARCAST_WEB_PORT": "99999"}, "BARCAST_WEB_PORT=99999 is out of range; use 1-65535"),
        ({"BARCAST_CHECKPOINT_MAX_S": "0"}, "BARCAST_CHECKPOINT_MAX_S=0.0 is out of range"),
        ({"BARCAST_SCORE_WINDOW": "0"}, "BARCAST_SCORE_WINDOW=0 is out of range"),
        ({"BARCAST_MAX_BATCH": "0"}, "BARCAST_MAX_BATCH=0 is out of range; use 1 or more"),
        ({"BARCAST_MAX_DELAY_MS": "-1"}, "BARCAST_MAX_DELAY_MS=-1.0 is out of range; use 0 or"),
        ({"BARCAST_PARTITIONS": "0"}, "BARCAST_PARTITIONS=0 is out of range; use 1 or more"),
        ({"BARCAST_REPLICATION": "0"}, "BARCAST_REPLICATION=0 is out of range; use 1 or more"),
        ({"BARCAST_SESSION_TIMEOUT_S": "0"}, "BARCAST_SESSION_TIMEOUT_S=0.0 is out of range"),
        ({"BARCAST_REBALANCE_TIMEOUT_S": "-5"}, "BARCAST_REBALANCE_TIMEOUT_S=-5.0 is out of"),
        ({"BARCAST_CONNECT_TIMEOUT_S": "0"}, "BARCAST_CONNECT_TIMEOUT_S=0.0 is out of range"),
        ({"BARCAST_CHECKPOINT_MAX_S": "61"}, "BARCAST_CHECKPOINT_MAX_S=61.0 is out of range; use"),
        ({"BARCAST_CHECKPOINT_MIN_S": "0"}, "BARCAST_CHECKPOINT_MIN_S=0.0 is out of range"),
        ({"BARCAST_MAX_RECORD_BYTES": "1"}, "use 65536-100000000"),
        ({"BARCAST_ONLINE_CALIBRATION": "sometimes"}, "is not a boolean"),
        (
            {"BARCAST_ONLINE_SCORING": "false"},
            "also set BARCAST_ONLINE_CALIBRATION=false, BARCAST_SHADOW_BASELINES=false, "
            "BARCAST_SERVE=model, BARCAST_CANARY=off, or BARCAST_ONLINE_SCORING=true",
        ),
        (
            {"BARCAST_ONLINE_SCORING": "false", "BARCAST_ONLINE_CALIBRATION": "false"}
            | {"BARCAST_SHADOW_BASELINES": "false", "BARCAST_CANARY": "off"},
            "also set BARCAST_SERVE=model, or",
        ),
        (
            {"BARCAST_SHADOW_BASELINES": "false"},
            "also set BARCAST_SERVE=model, BARCAST_CANARY=off, or BARCAST_SHADOW_BASELINES",
        ),
        ({"BARCAST_SERVE": "sometimes"}, "BARCAST_SERVE='sometimes' is not valid"),
        ({"BARCAST_CANARY": "maybe"}, "BARCAST_CANARY='maybe' is not a boolean"),
        ({"BARCAST_CANARY_FORECASTS": "0"}, "BARCAST_CANARY_FORECASTS=0 is out of range"),
        ({"BARCAST_EXPLAIN": "sometimes"}, "BARCAST_EXPLAIN='sometimes' is not a boolean"),
        ({"BARCAST_EXPLAIN_TOP_K": "0"}, "BARCAST_EXPLAIN_TOP_K=0 is out of range; use 1-227"),
        ({"BARCAST_EXPLAIN_TOP_K": "228"}, "BARCAST_EXPLAIN_TOP_K=228 is out of range"),
        ({"BARCAST_EXPLAIN_TOP_K": "ten"}, "BARCAST_EXPLAIN_TOP_K='ten' is not a number"),
        (
            {"BARCAST_SSL_CAFILE": "/no/such/ca.pem"},
            "BARCAST_SSL_CAFILE='/no/such/ca.pem' is not a file",
        ),
        (
            {"BARCAST_CPU_PRECISION": "int8"},
            "BARCAST_CPU_PRECISION='int8' is no longer a setting: CPU inference is always fp32",
        ),
    ],
)
def test_bad_values_name_the_variable_and_the_fix(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingError, match=message.replace("(", r"\(")):
        Settings.from_env(env)


def test_scoring_and_all_that_scores_beside_it_turn_off_together() -> None:
    off = {"BARCAST_ONLINE_SCORING": "false", "BARCAST_ONLINE_CALIBRATION": "false"}
    off |= {"BARCAST_SHADOW_BASELINES": "false", "BARCAST_SERVE": "model", "BARCAST_CANARY": "off"}
    settings = Settings.from_env(off)
    assert not (settings.online_scoring or settings.shadow_baselines or settings.canary)
    on = Settings.from_env({"BARCAST_CANARY": "on", "BARCAST_CANARY_FORECASTS": "500"})
    assert on.canary and on.canary_forecasts == 500 and on.serve == "auto"


def test_round_trip_through_environment() -> None:
    settings = Settings.from_env({"BARCAST_ROLE": "forecast", "BARCAST_SASL_PASSWORD": "pw"})
    assert Settings.from_env(settings.to_env()) == settings
    assert sorted(settings.to_env()) == sorted(env_names())


def test_security_settings_reach_both_clients_and_secrets_are_redacted() -> None:
    settings = Settings.from_env(
        {
            "BARCAST_BROKER": "kafka.prod:9093",
            "BARCAST_SECURITY_PROTOCOL": "SASL_SSL",
            "BARCAST_SASL_MECHANISM": "SCRAM-SHA-512",
            "BARCAST_SASL_USERNAME": "svc",
            "BARCAST_SASL_PASSWORD": "hunter2",
        }
    )
    rdkafka = confluent_config(settings)
    assert rdkafka["security.protocol"] == "sasl_ssl"
    assert rdkafka["sasl.mechanism"] == "SCRAM-SHA-512" and rdkafka["sasl.password"] == "hunter2"
    aio = aiokafka_config(settings)
    assert aio["sasl_mechanism"] == "SCRAM-SHA-512" and aio["ssl_context"] is not None
    redacted = settings.redacted()
    assert redacted["sasl_password"] == "***" and "hunter2" not in str(redacted)
    assert "hunter2" not in repr(settings)


def test_the_docs_settings_table_is_generated_from_the_code() -> None:
    assert generated("docs/operations.md", "settings-table").strip() == markdown_table(), (
        "docs/operations.md's settings table is stale: `.venv/bin/python -m benchmarks.docs "
        "--write`"
    )


@pytest.mark.parametrize(
    ("value", "servers"),
    [
        ("k1:9092,k2:9092", "k1:9092,k2:9092"),
        ("kafka://k1:9092", "k1:9092"),
        ("kafka://k1:9092,k2:9093", "k1:9092,k2:9093"),
        ("kafka://k1:9092;k2:9093", "k1:9092,k2:9093"),
        ("kafka://k1:9092;kafka://k2:9093", "k1:9092,k2:9093"),
        (" k1:9092 , [::1]:9093", "k1:9092,[::1]:9093"),
    ],
)
def test_brokers_are_accepted_as_kafka_clients_and_faust_write_them(
    value: str, servers: str
) -> None:
    settings = Settings.from_env({"BARCAST_BROKER": value})
    assert bootstrap_servers(settings) == servers
    assert confluent_config(settings)["bootstrap.servers"] == servers
    assert aiokafka_config(settings)["bootstrap_servers"] == servers


@pytest.mark.parametrize(
    "value", ["kafka://k1", "k1:9092,", "http://k1:9092", "k1:port", "k1:0", "k1:9092/x", ":9092"]
)
def test_a_malformed_broker_names_the_accepted_forms(value: str) -> None:
    with pytest.raises(SettingError, match="BARCAST_BROKER") as error:
        Settings.from_env({"BARCAST_BROKER": value})
    assert "kafka://host:port" in str(error.value) and "host:port[,host:port" in str(error.value)


def test_max_record_bytes_must_leave_room_for_a_bounded_dead_letter() -> None:
    with pytest.raises(SettingError, match="BARCAST_MAX_RECORD_BYTES=1000 is out of range"):
        Settings.from_env({"BARCAST_MAX_RECORD_BYTES": "1000"})


def test_a_table_store_is_refused_naming_where_state_lives_now() -> None:
    with pytest.raises(SettingError, match=r"BARCAST_STORE='rocksdb://' is no longer a setting"):
        Settings.from_env({"BARCAST_STORE": "rocksdb://"})


def test_isolated_settings_share_no_topic_or_group_with_the_base() -> None:
    base = Settings.from_env({})
    run = base.isolated("run-1")
    names = [f.name for f in fields(Settings) if f.name.startswith("topic_")]
    assert all(getattr(run, n) == f"{getattr(base, n)}.run-1" for n in names)
    assert run.app_id == "barcast-run-1" != base.app_id
    assert replace(run, app_id=base.app_id, **{n: getattr(base, n) for n in names}) == base


def test_a_name_that_is_no_setting_is_found_for_the_worker_to_say() -> None:
    env = {"BARCAST_PARTITONS": "8", "BARCAST_PARTITIONS": "8", "BARCAST_STORE": "x", "HOME": "/"}
    assert Settings.unknown(env) == ["BARCAST_PARTITONS"]  # a removed one has its own error
