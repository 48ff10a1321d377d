"""The Grafana dashboard and the Prometheus alerts use only metrics the worker exports: checked
against `Metrics().render()` and, in the integration test, against a real worker's /metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from streams.broker import free_port
from streams.kafka import ensure_topics, pipeline_topics
from streams.metrics import Metrics
from streams.settings import REPO_ROOT, Settings

DEPLOY = REPO_ROOT / "deploy"
RUNBOOK = REPO_ROOT / "docs" / "operations.md"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "barcast.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
METRIC_NAME = re.compile(r"\bbarcast_[a-z0-9_]+\b")
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}
# What the issue asks the dashboard to show, as the metric each panel must query.
REQUIRED_PANELS = {
    "lag": "barcast_consumer_lag",
    "corrections": "barcast_corrections_total",
    "dead letters": "barcast_dlq_total",
    "batch size": "barcast_batch_size_bucket",
    "inference latency": "barcast_inference_seconds_bucket",
    "bar-to-forecast latency": "barcast_bar_to_forecast_seconds_bucket",
    "forecasts/s": "barcast_forecasts_total",
    "forecast coverage": "barcast_forecast_coverage",
    "forecast pinball": "barcast_forecast_pinball",
}


def series_names(exposition: str) -> set[str]:
    """Every series name PromQL can select from this exposition, including those of labelled
    families that have no children yet (their names are fixed by the family's type)."""
    return {
        family.name + suffix
        for family in text_string_to_metric_families(exposition)
        for suffix in SERIES_SUFFIXES[family.type]
    }


def exported_by_workers() -> set[str]:
    return series_names(Metrics().render().decode())


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def alert_rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def referenced(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in METRIC_NAME.findall(expr)}


def assert_only_exported(exported: set[str]) -> None:
    for source, exprs in (
        ("dashboard", dashboard_exprs()),
        ("alerts", [r["expr"] for r in alert_rules()]),
    ):
        unknown = referenced(exprs) - exported
        assert not unknown, f"the {source} queries {sorted(unknown)}, which no worker exports"


def test_series_names_follow_the_metric_types() -> None:
    names = series_names(Metrics().render().decode())
    assert {"barcast_bars_total", "barcast_batch_size_bucket", "barcast_model_info"} <= names
    assert "barcast_corrections_total" in names  # labelled, no child yet
    assert "barcast_bars" not in names
    assert referenced(["rate(barcast_nope_total[5m])"]) - names == {"barcast_nope_total"}


def test_dashboard_and_alerts_query_only_exported_metrics() -> None:
    assert {"barcast_forecast_coverage", "barcast_forecast_pinball"} <= exported_by_workers()
    assert_only_exported(exported_by_workers())


def test_an_alert_fires_when_coverage_leaves_70_to_90_percent_for_30_minutes() -> None:
    (rule,) = [r for r in alert_rules() if "barcast_forecast_coverage" in r["expr"]]
    assert rule["for"] == "30m"
    assert re.search(r"barcast_forecast_coverage\)\s*<\s*0\.7\b", rule["expr"]), rule["expr"]
    assert re.search(r"barcast_forecast_coverage\)\s*>\s*0\.9\b", rule["expr"]), rule["expr"]


def test_dashboard_shows_what_operators_need() -> None:
    exprs = dashboard_exprs()
    for panel, metric in REQUIRED_PANELS.items():
        assert any(metric in expr for expr in exprs), f"no panel queries {metric} ({panel})"


def test_dashboard_loads_with_the_provisioned_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "barcast"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, panel["title"]
        assert panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_every_alert_is_complete_and_explained_in_the_runbook() -> None:
    runbook = RUNBOOK.read_text()
    rules = alert_rules()
    assert len(rules) >= 8
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert re.fullmatch(r"\d+m", rule["for"]), rule["alert"]
        assert f"`{rule['alert']}`" in runbook, (
            f"docs/operations.md does not explain {rule['alert']}"
        )


def test_healthcheck_reports_a_dead_port() -> None:
    result = run_healthcheck(free_port())
    assert result.returncode == 1
    assert "unhealthy" in result.stderr


def run_healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEPLOY / "healthcheck.py")],
        env={"BARCAST_WEB_PORT": str(port), "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def scrape(port: int) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


@pytest.mark.integration
def test_a_real_worker_serves_what_dashboard_and_alerts_query(broker_settings: Settings) -> None:
    from tests.worker import Worker

    # Every role exports the same metrics (one `Metrics` per app); passthrough starts fastest.
    settings = replace(broker_settings, role="passthrough")
    ensure_topics(settings, pipeline_topics(settings))
    with Worker(settings) as worker:
        port = worker.settings.web_port
        health = run_healthcheck(port)
        assert health.returncode == 0, health.stderr
        content_type, body = scrape(port)
        # The lag timer fills barcast_consumer_lag once partitions are assigned and fetched.
        deadline = time.monotonic() + 60
        while f'topic="{settings.topic_raw}"' not in body and time.monotonic() < deadline:
            time.sleep(1)
            content_type, body = scrape(port)
    assert content_type.startswith("text/plain; version=0.0.4")
    exported = series_names(body)
    assert {n for n in exported if n.startswith("barcast_")} == series_names(
        Metrics().render().decode()
    )
    assert_only_exported(exported)
    lag = {
        sample.labels["topic"]
        for family in text_string_to_metric_families(body)
        if family.name == "barcast_consumer_lag"
        for sample in family.samples
    }
    assert settings.topic_raw in lag, f"no consumer lag reported for {settings.topic_raw}"
