"""Kubernetes manifests: valid against the Kubernetes schemas bundled by kubernetes-validate (strict, offline)
and shaped as the deployment needs. No cluster is available here: nothing is applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from corral.config.parse import parse_duration_s
from support.deploy_files import IMAGE_ENV, POD_ENV, REPO, load_documents, setting_env_names

MANIFESTS = sorted((REPO / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.31.0"  # the oldest version the manifests target; every field used exists there
NEWEST_BUNDLED = "1.37.0"
DRAIN_MARGIN_S = 30  # deregistration and backend stop after the drain wait


def _resources() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in load_documents(path)]


def _find(kind: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in _resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = workload["spec"]["template"]["spec"]["containers"][0]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, NEWEST_BUNDLED])
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_against_the_kubernetes_schema(path: Path, version: str) -> None:
    for resource in load_documents(path):
        kubernetes_validate.validate(resource, version, strict=True)


def test_the_schema_check_rejects_a_wrong_field_type() -> None:
    """The validation is live: a replica count given as text fails."""
    broken = {**_find("Deployment", "corral-frontend")}
    broken["spec"] = {**broken["spec"], "replicas": "two"}
    with pytest.raises(kubernetes_validate.ValidationError, match="'two' is not of type 'integer'"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_resource_lives_in_the_corral_namespace() -> None:
    stray = [
        r["metadata"]["name"]
        for r in _resources()
        if r["kind"] != "Namespace" and r["metadata"].get("namespace") != "corral"
    ]
    assert stray == []


def test_frontend_runs_two_replicas_behind_a_service_with_probes() -> None:
    deployment = _find("Deployment", "corral-frontend")
    service = _find("Service", "corral-frontend")
    assert deployment["spec"]["replicas"] >= 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container = _container(deployment)
    assert container["args"] == ["run"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["/usr/local/bin/corral-drain"]


@pytest.mark.parametrize("name", ["corral-worker", "corral-worker-gpu"])
def test_worker_statefulset_probes_drains_and_outlives_its_drain(name: str) -> None:
    workload = _find("StatefulSet", name)
    assert workload["spec"]["serviceName"] == name
    assert _find("Service", name)["spec"]["clusterIP"] == "None"  # stable pod DNS for advertise addresses
    container = _container(workload)
    assert container["args"] == ["worker"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"files": 50050, "grpc": 50051}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "files"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "files"}
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["/usr/local/bin/corral-drain"]
    env = _env(container)
    drain_s = parse_duration_s(env["CORRAL_DRAIN_TIMEOUT"])
    assert workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= drain_s + DRAIN_MARGIN_S
    assert env["LOCALAI_ADVERTISE_ADDR"] == f"$(POD_NAME).{name}.$(POD_NAMESPACE).svc.cluster.local:50051"
    assert (
        env["LOCALAI_ADVERTISE_HTTP_ADDR"] == f"$(POD_NAME).{name}.$(POD_NAMESPACE).svc.cluster.local:50050"
    )
    assert env["LOCALAI_REGISTER_TO"] == "http://corral-frontend:8080"


def test_gpu_worker_asks_for_a_gpu_on_gpu_nodes_with_nvml() -> None:
    workload = _find("StatefulSet", "corral-worker-gpu")
    pod = workload["spec"]["template"]["spec"]
    container = _container(workload)
    assert container["image"] == "corral:0.1.0-cuda12"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert _env(container)["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


def test_nats_jwt_setup_job_writes_where_nats_reads() -> None:
    job = _find("Job", "corral-nats-auth-setup")
    (generate,) = job["spec"]["template"]["spec"]["initContainers"]
    assert generate["args"] == ["nats-auth-setup", "--out", "/auth/nats-auth"]
    store_script = _container(job)["args"][0]
    assert "kubectl create secret generic corral-nats-server" in store_script
    assert (
        "kubectl create secret generic corral-nats-frontend --from-env-file=/auth/nats-auth/frontend.env"
        in store_script
    )
    nats = _container(_find("StatefulSet", "corral-nats"))
    assert nats["args"][:3] == ["-c", "/auth/nats-auth/nats-server.conf", "--js"]
    # nats-server.conf names operator.jwt by the path it was generated under
    assert {"name": "auth", "mountPath": "/auth/nats-auth", "readOnly": True} in nats["volumeMounts"]
    frontend = _container(_find("Deployment", "corral-frontend"))
    assert {"secretRef": {"name": "corral-nats-frontend"}} in frontend["envFrom"]
    role = _find("Role", "corral-nats-auth")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]}]


def test_secret_references_name_keys_the_secret_holds() -> None:
    held = set(_find("Secret", "corral-secrets")["stringData"])
    referenced = set()
    for resource in _resources():
        if resource["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        for container in resource["spec"]["template"]["spec"]["containers"]:
            for value in _env(container).values():
                if isinstance(value, dict) and "secretKeyRef" in value:
                    assert value["secretKeyRef"]["name"] == "corral-secrets"
                    referenced.add(value["secretKeyRef"]["key"])
    assert referenced == held == {"registration-token", "admin-key", "database-url"}


def test_every_pod_runs_as_non_root_without_privilege_escalation() -> None:
    for resource in _resources():
        if resource["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        pod = resource["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, resource["metadata"]["name"]
        for container in pod["containers"] + pod.get("initContainers", []):
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_every_corral_variable_is_one_corral_reads() -> None:
    known = setting_env_names() | IMAGE_ENV | POD_ENV
    config = set(_find("ConfigMap", "corral-config")["data"])
    unknown = sorted(config - known)
    for resource in _resources():
        if resource["kind"] in ("Deployment", "StatefulSet"):
            unknown += sorted(set(_env(_container(resource))) - known)
    assert unknown == []


def test_agent_worker_is_declared_and_started() -> None:
    """`corral agent-worker` runs MCP tools and agent jobs; one replica by default."""
    deployment = _find("Deployment", "corral-agent-worker")
    assert deployment["spec"]["replicas"] == 1
    assert _container(deployment)["args"] == ["agent-worker"]
