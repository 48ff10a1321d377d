"""deploy/compose.yaml: valid against the vendored Compose specification schema (check-jsonschema,
offline), and wired the way the runbook promises."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.settings import REPO_ROOT, Settings

DEPLOY = REPO_ROOT / "deploy"
SCHEMA = DEPLOY / "schemas" / "compose-spec.json"
# The copy check-jsonschema 0.38.0 vendors (builtin `vendor.compose-spec`, Apache-2.0).
SCHEMA_SHA256 = "73ca5878c77570ba222a558016c7b3c6770ba5f3377786593e32180666512f8f"
WORKER_COMMAND = ["faust", "-A", "streams", "worker", "-l", "info"]
BARCAST_SERVICES = ("stream", "forecast", "forecast-cpu", "replay", "ingest-live")
WORKERS = ("stream", "forecast", "forecast-cpu")


def check_jsonschema(instance: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(instance)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def environment(compose: dict[str, Any], service: str) -> dict[str, str]:
    return {k: str(v) for k, v in compose["services"][service].get("environment", {}).items()}


def example_env() -> dict[str, str]:
    lines = (DEPLOY / "example.env").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}`, enough for this file."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"{name} is required: {arg}")
        return arg or ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", substitute, value)


def test_compose_file_is_valid_against_the_compose_spec() -> None:
    result = check_jsonschema(DEPLOY / "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_rejects_a_misspelled_key(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    text = (DEPLOY / "compose.yaml").read_text()
    broken.write_text(text.replace("    healthcheck:\n", "    healthchek:\n", 1))
    result = check_jsonschema(broken)
    assert result.returncode != 0
    assert "healthchek" in result.stdout + result.stderr


def test_vendored_schema_is_the_published_one() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert (DEPLOY / "schemas" / "LICENSE.compose-spec").exists()


def test_every_barcast_service_runs_one_image_of_this_repo(compose: dict[str, Any]) -> None:
    builds = {}
    for name in BARCAST_SERVICES:
        service = compose["services"][name]
        builds[name] = (service["build"]["context"], service["build"]["dockerfile"])
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).exists()
    assert builds.pop("forecast") == ("..", "deploy/Dockerfile.cuda")
    assert set(builds.values()) == {("..", "deploy/Dockerfile")}


def test_workers_run_the_faust_worker_with_their_role(compose: dict[str, Any]) -> None:
    roles = {}
    for name in WORKERS:
        assert compose["services"][name]["command"] == WORKER_COMMAND, name
        roles[name] = environment(compose, name)["BARCAST_ROLE"]
    assert roles == {"stream": "stream", "forecast": "forecast", "forecast-cpu": "forecast"}


def test_with_the_example_env_every_service_gets_valid_settings(compose: dict[str, Any]) -> None:
    for name in BARCAST_SERVICES:
        env = {
            k: interpolate(v, example_env())
            for k, v in environment(compose, name).items()
            if k.startswith("BARCAST_")
        }
        settings = Settings.from_env(env)
        assert settings.broker == "kafka:9092", name
        assert settings.web_port == 6066, name


def test_topics_are_created_with_the_workers_partitions(compose: dict[str, Any]) -> None:
    topics = environment(compose, "topics")
    for name in BARCAST_SERVICES:
        env = environment(compose, name)
        for key in ("BARCAST_PARTITIONS", "BARCAST_REPLICATION", "BARCAST_TOPIC_RAW"):
            assert env[key] == topics[key], (name, key)
    script = compose["services"]["topics"]["command"][0]
    for key in ("BARCAST_PARTITIONS", "BARCAST_REPLICATION", "BARCAST_BROKER"):
        assert f"$${key}" in script
    # each topic a worker may write, whatever the settings: the broker creates none
    every = [f.name.upper() for f in fields(Settings) if f.name.startswith("topic_")]
    assert len(every) == 8
    for topic in every:
        assert f'create "$$BARCAST_{topic}"' in script
    barcast_deps = compose["services"]["stream"]["depends_on"]
    assert barcast_deps["topics"]["condition"] == "service_completed_successfully"


def test_kafka_runs_in_kraft_mode_on_a_pinned_official_image(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    image, tag = kafka["image"].split(":")
    assert image == "apache/kafka"
    assert tag.count(".") == 2
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "kafka:9092" in kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert compose["services"]["topics"]["image"] == kafka["image"]


def test_forecast_worker_reserves_a_gpu_with_a_cpu_profile_fallback(
    compose: dict[str, Any],
) -> None:
    gpu = compose["services"]["forecast"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]
    assert device["count"] == 1
    assert gpu["profiles"] == ["gpu"]
    assert environment(compose, "forecast")["BARCAST_DEVICE"] == "cuda"
    assert compose["services"]["forecast-cpu"]["profiles"] == ["cpu"]
    assert environment(compose, "forecast-cpu")["BARCAST_DEVICE"] == "cpu"
    assert compose["services"]["replay"]["profiles"] == ["replay"]
    assert compose["services"]["ingest-live"]["profiles"] == ["live"]


def test_secrets_come_from_the_env_file_only_where_needed(compose: dict[str, Any]) -> None:
    assert environment(compose, "ingest-live")["DATABENTO_API_KEY"] == "${DATABENTO_API_KEY:-}"
    for name in ("stream", "forecast", "forecast-cpu", "replay"):
        assert "DATABENTO_API_KEY" not in environment(compose, name), name
        assert environment(compose, name)["BARCAST_SASL_PASSWORD"].startswith("${"), name


def test_prometheus_scrapes_every_worker_on_the_web_port(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    scraped = {
        (name, sd["port"])
        for job in config["scrape_configs"]
        for sd in job["dns_sd_configs"]
        for name in sd["names"]
    }
    port = int(compose["x-barcast-settings"]["BARCAST_WEB_PORT"])
    assert scraped == {(name, port) for name in WORKERS}
    assert config["rule_files"] == ["alerts.yml"]
    assert (DEPLOY / "prometheus" / "alerts.yml").exists()


def test_grafana_is_provisioned_from_files_in_deploy(compose: dict[str, Any]) -> None:
    volumes = compose["services"]["grafana"]["volumes"]
    for volume in volumes:
        source = volume.split(":")[0]
        if source.startswith("./"):
            assert (DEPLOY / source).is_dir(), source
    datasource = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert datasource["datasources"][0]["uid"] == "prometheus"
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/barcast.yml").read_text())
    mounted = {v.split(":")[1] for v in volumes}
    assert provider["providers"][0]["options"]["path"] in mounted
