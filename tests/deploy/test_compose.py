"""Compose files: valid against the Compose specification's JSON schema (bundled by check-jsonschema, offline)
and wired the way the specification's docker-compose.distributed.yaml is. No Docker engine runs them here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from check_jsonschema.builtin_schemas import get_builtin_schema

from support.deploy_files import IMAGE_ENV, REPO, load_documents, setting_env_names

BASE = "docker-compose.distributed.yaml"
COMPOSE_FILES = (BASE, "docker-compose.shared-volume.yaml", "docker-compose.s3.yaml")
CORRAL_IMAGES = ("corral:0.1.0", "corral:0.1.0-cuda12")


def _compose(name: str) -> dict[str, Any]:
    (document,) = load_documents(REPO / name)
    return document


def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(get_builtin_schema("vendor.compose-spec"))


def _corral_services(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in document["services"].items()
        if service.get("image") in CORRAL_IMAGES
    }


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_is_valid_against_the_compose_specification(name: str) -> None:
    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in _validator().iter_errors(_compose(name))
    ]
    assert errors == []


def test_the_compose_schema_rejects_an_unknown_service_key() -> None:
    """The validation is live: a misspelt key fails."""
    errors = list(
        _validator().iter_errors({"services": {"frontend": {"image": "corral:0.1.0", "comand": "run"}}})
    )
    assert errors and "'comand' was unexpected" in errors[0].message


def test_distributed_stack_has_the_specifications_services() -> None:
    services = _compose(BASE)["services"]
    assert {"postgres", "nats", "frontend", "worker-1", "worker-2", "agent-worker-1"} <= set(services)
    assert services["nats"]["command"][:3] == ["--js", "-m", "8222"]  # JetStream and monitoring
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    assert services["frontend"]["command"] == ["run"]
    assert services["agent-worker-1"]["command"] == ["agent-worker"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in services["agent-worker-1"]["volumes"]
    assert services["agent-worker-1"]["profiles"] == ["agents"]  # optional: `--profile agents`


@pytest.mark.parametrize("worker", ["worker-1", "worker-2", "worker-gpu"])
def test_each_worker_advertises_its_own_grpc_and_file_server_addresses(worker: str) -> None:
    service = _compose(BASE)["services"][worker]
    env = service["environment"]
    assert service["command"] == ["worker"]
    assert env["LOCALAI_ADVERTISE_ADDR"] == f"{worker}:50051"
    assert env["LOCALAI_ADVERTISE_HTTP_ADDR"] == f"{worker}:50050"  # file server: base port - 1
    assert env["LOCALAI_REGISTER_TO"] == "http://frontend:8080"


def test_gpu_worker_sees_nvml_and_reserves_the_gpus() -> None:
    service = _compose(BASE)["services"]["worker-gpu"]
    assert service["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert service["init"] is True
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "utility" in device["capabilities"]


def test_secrets_come_from_the_env_file_and_the_example_defines_each_one() -> None:
    text = (REPO / BASE).read_text() + (REPO / "docker-compose.s3.yaml").read_text()
    required = set(re.findall(r"\$\{([A-Z_]+):\?", text))
    assert {"LOCALAI_REGISTRATION_TOKEN", "LOCALAI_ADMIN_KEY", "POSTGRES_PASSWORD"} <= required
    example = (REPO / "deploy" / "compose" / "distributed.env.example").read_text()
    defined = {line.split("=", 1)[0] for line in example.splitlines() if line and not line.startswith("#")}
    assert required <= defined
    frontend_env = _compose(BASE)["services"]["frontend"]["environment"]
    assert frontend_env["LOCALAI_BOOTSTRAP_ADMIN_KEY"].startswith("${LOCALAI_ADMIN_KEY:?")


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_every_corral_variable_is_one_corral_reads(name: str) -> None:
    document = _compose(name)
    base = _compose(BASE)
    known = setting_env_names() | IMAGE_ENV
    unknown = {}
    for service_name, service in document["services"].items():
        if (base["services"].get(service_name) or service).get("image") not in CORRAL_IMAGES:
            continue
        names = {env for env in service.get("environment", {}) if env.startswith(("LOCALAI_", "CORRAL_"))}
        if names - known:
            unknown[service_name] = sorted(names - known)
    assert unknown == {}


@pytest.mark.parametrize("name", COMPOSE_FILES[1:])
def test_override_files_only_extend_services_of_the_base_stack(name: str) -> None:
    base = set(_compose(BASE)["services"])
    services = _compose(name)["services"]
    strays = [s for s, service in services.items() if s not in base and "image" not in service]
    assert strays == []


def test_shared_volume_mode_mounts_one_models_volume_at_the_same_path_everywhere() -> None:
    document = _compose("docker-compose.shared-volume.yaml")
    base_corral = _corral_services(_compose(BASE))
    assert document["services"]["frontend"]["environment"]["LOCALAI_DISTRIBUTED_SHARED_MODELS"] == "true"
    nodes = [s for s in base_corral if s != "agent-worker-1"]
    mounts = {s: document["services"][s]["volumes"] for s in nodes}
    assert mounts == {s: ["shared-models:/data/models"] for s in nodes}
    models_paths = {base_corral[s]["environment"]["LOCALAI_MODELS_PATH"] for s in nodes}
    assert models_paths == {"/data/models"}


def test_s3_variant_points_frontend_and_workers_at_minio() -> None:
    document = _compose("docker-compose.s3.yaml")
    assert document["services"]["minio"]["image"].startswith("minio/minio:RELEASE.")
    for node in ("frontend", "worker-1", "worker-2", "worker-gpu"):
        env = document["services"][node]["environment"]
        assert env["LOCALAI_STORAGE_URL"] == "http://minio:9000"
        assert env["LOCALAI_STORAGE_BUCKET"] == "localai"
    assert "mc mb --ignore-existing local/localai" in document["services"]["minio-bucket"]["command"][0]


def test_compose_files_sit_at_the_repository_root_as_the_specification_names_them() -> None:
    assert all((REPO / name).is_file() for name in COMPOSE_FILES)
    assert Path(REPO / BASE).read_text().count("Shared Volume Mode") >= 2
