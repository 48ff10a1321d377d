"""deploy/ and the docs name only settings barcast has; deploy/ never points at the embedded
broker and commits no secret."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from streams.settings import REPO_ROOT, env_names

DEPLOY = REPO_ROOT / "deploy"
SETTING = re.compile(r"\bBARCAST_[A-Z0-9_]+\b")
TEXT_SUFFIXES = {".yaml", ".yml", ".env", ".md", ".py", ".json", ""}
SECRETS = ("DATABENTO_API_KEY", "BARCAST_SASL_PASSWORD", "BARCAST_SASL_USERNAME")


def deploy_files() -> list[Path]:
    """Every text file under deploy/ a person or a tool reads settings from."""
    return sorted(
        p
        for p in DEPLOY.rglob("*")
        if p.is_file() and p.suffix in TEXT_SUFFIXES | {".cuda"} and "schemas" not in p.parts
    )


def unknown_settings(text: str) -> set[str]:
    return set(SETTING.findall(text)) - set(env_names())


def env_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def test_the_scan_covers_every_kind_of_deploy_file() -> None:
    names = {p.name for p in deploy_files()}
    for expected in ("compose.yaml", "example.env", "configmap.yaml", "Dockerfile",
                     "Dockerfile.cuda", "replay.yaml"):  # fmt: skip
        assert expected in names


def test_the_scan_catches_a_typo() -> None:
    assert unknown_settings("BARCAST_BROKER: kafka:9092\nBARCAST_PARTITONS: 8") == {
        "BARCAST_PARTITONS"
    }


@pytest.mark.parametrize("path", deploy_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_barcast_variable_in_deploy_is_a_setting(path: Path) -> None:
    unknown = unknown_settings(path.read_text())
    assert not unknown, (
        f"{path.relative_to(REPO_ROOT)} sets {sorted(unknown)}, which streams/settings.py does "
        f"not read; fix the name (known: see `streams.settings.env_names()`)"
    )


@pytest.mark.parametrize(
    "path",
    [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))],
    ids=lambda p: str(p.relative_to(REPO_ROOT)),
)
def test_every_barcast_variable_in_the_docs_is_a_setting(path: Path) -> None:
    unknown = unknown_settings(path.read_text())
    assert not unknown, (
        f"{path.relative_to(REPO_ROOT)} names {sorted(unknown)}, which streams/settings.py does "
        f"not read; fix the name (known: see `streams.settings.env_names()`)"
    )


def test_nothing_in_deploy_uses_the_embedded_broker() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    configmap = yaml.safe_load((DEPLOY / "k8s" / "configmap.yaml").read_text())
    brokers = {
        "compose": compose["x-barcast-settings"]["BARCAST_BROKER"],
        "k8s": configmap["data"]["BARCAST_BROKER"],
    }
    assert brokers["compose"] == "kafka:9092"
    assert all(b and b != "embedded" and "127.0.0.1" not in b for b in brokers.values())
    for path in (DEPLOY / "Dockerfile", DEPLOY / "Dockerfile.cuda"):
        assert "embedded" not in re.sub(r"#.*", "", path.read_text()), path


def test_example_env_holds_no_secret_values() -> None:
    values = env_file(DEPLOY / "example.env")
    for name in SECRETS:
        assert values.get(name, "") == "", f"deploy/example.env must leave {name} empty"
    assert values["GRAFANA_ADMIN_PASSWORD"] == ""


def test_real_env_files_are_git_ignored() -> None:
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert "deploy/*.env" in ignored
    assert "deploy/.env" in ignored
    assert "!deploy/example.env" in ignored
