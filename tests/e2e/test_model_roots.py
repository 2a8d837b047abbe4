"""Model files stay inside their roots, against the real stack (issue 21): a config naming a file outside the
models directory -- by admin PUT/PATCH or by a YAML at boot -- is refused (400 naming the field) or skipped (a
log line naming the file and the fix); nothing of such a file reaches a worker, and no `.sha256` is written
beside it. A directory listed in CORRAL_MODEL_PATH_ROOTS is served like the models directory, but never
written to."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.staging.hashing import hash_sidecar_path
from support.cluster import Cluster

pytestmark = pytest.mark.slow

SECRET = b"root:x:0:0:the frontend must never ship this file\n"
FIX = "keep model files under it, or list the directory in CORRAL_MODEL_PATH_ROOTS"
SIM = "backend: simulator\ncontext_size: 256\n"


@dataclass
class Env:
    cluster: Cluster
    models: Path  # the frontend's models directory, as it resolves it
    outside: Path  # a directory next to it, not a root: holds the secret
    shared: Path  # a directory listed in CORRAL_MODEL_PATH_ROOTS

    @property
    def secret(self) -> Path:
        return self.outside / "secret.txt"

    def where(self) -> str:
        return f"the models directory {self.models} and CORRAL_MODEL_PATH_ROOTS ({self.shared})"


def _boot_configs(models: Path, outside: Path, shared: Path) -> None:
    (models / "good.yaml").write_text(f"name: good\n{SIM}parameters:\n  model: good\n")
    (models / "boot-absolute.yaml").write_text(
        f"name: boot-absolute\n{SIM}parameters:\n  model: {outside}/secret.txt\n"
    )
    (models / "boot-dotdot.yaml").write_text(
        f"name: boot-dotdot\n{SIM}parameters:\n  model: ../outside/secret.txt\n"
    )
    (models / "boot-link.yaml").write_text(f"name: boot-link\n{SIM}parameters:\n  model: link.bin\n")
    (models / "link.bin").symlink_to(outside / "secret.txt")  # inside the models dir, pointing out
    (models / "boot-lora.yaml").write_text(
        f"name: boot-lora\n{SIM}parameters:\n  model: good\nlora_adapter: {outside}/secret.txt\n"
    )
    (models / "boot-shared.yaml").write_text(
        f"name: boot-shared\n{SIM}parameters:\n  model: {shared}/weights.bin\n"
    )


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    root = state_root / "e2e-model-roots"
    outside, shared = root / "outside", root / "shared"
    c = Cluster(
        root=root,
        database_url=make_database(),
        nats_url=nats_url,
        frontend_env={"CORRAL_MODEL_PATH_ROOTS": str(shared)},
    )
    for directory in (c.models_dir, outside, shared):
        directory.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_bytes(SECRET)
    (shared / "weights.bin").write_bytes(os.urandom(64 << 10))
    _boot_configs(c.models_dir, outside, shared)
    try:
        c.start_frontend()
        c.start_worker("w1")
        yield Env(c, c.models_dir.resolve(), outside.resolve(), shared.resolve())
    finally:
        c.stop()


def _chat(env: Env, model: str) -> httpx.Response:
    return httpx.post(
        f"{env.cluster.frontend_url}/v1/chat/completions",
        timeout=120,
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )


def _put(env: Env, name: str, yaml_text: str) -> httpx.Response:
    return httpx.put(
        f"{env.cluster.frontend_url}/api/model-configs/{name}",
        content=yaml_text.encode(),
        headers=env.cluster.admin_headers,
        timeout=30,
    )


def _refused(answer: httpx.Response, field: str, value: str, resolved: str | Path, env: Env) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == field
    assert (
        f"field {field!r}: {value!r} resolves to {resolved}, outside {env.where()}; {FIX}" in error["message"]
    )


def _worker_files(env: Env) -> list[Path]:
    return [p for p in (env.cluster.root / "w1").rglob("*") if p.is_file()]


def _assert_the_secret_never_left(env: Env) -> None:
    shipped = [
        p for p in _worker_files(env) if p.read_bytes() == SECRET or p.name in ("secret.txt", "passwd")
    ]
    assert shipped == []
    assert not hash_sidecar_path(env.secret).exists()
    assert not hash_sidecar_path(Path("/etc/passwd")).exists()


def test_yamls_at_boot_naming_files_outside_are_skipped_with_a_line_naming_the_file_and_the_fix(
    env: Env,
) -> None:
    log = env.cluster.frontend.log() if env.cluster.frontend else ""
    cases = {  # file -> (field, value, where it resolves)
        "boot-absolute.yaml": ("parameters.model", f"{env.outside}/secret.txt", env.secret),
        "boot-dotdot.yaml": ("parameters.model", "../outside/secret.txt", env.secret),
        "boot-link.yaml": ("parameters.model", "link.bin", env.secret),
        "boot-lora.yaml": ("lora_adapter", f"{env.outside}/secret.txt", env.secret),
    }
    for name, (field, value, resolved) in cases.items():
        path = env.cluster.models_dir.resolve() / name
        assert (
            f"skipping model config {path}: {path}: field {field!r}: {value!r} resolves to {resolved}, "
            f"outside {env.where()}; {FIX}"
        ) in log
    listed = httpx.get(
        f"{env.cluster.frontend_url}/api/model-configs", headers=env.cluster.admin_headers
    ).json()
    assert sorted(c["name"] for c in listed["configs"]) == ["boot-shared", "good"]
    for name in ("boot-absolute", "boot-dotdot", "boot-link", "boot-lora"):
        assert _chat(env, name).status_code == 404
    assert _chat(env, "good").status_code == 200
    _assert_the_secret_never_left(env)


def test_an_admin_put_climbing_out_with_dot_dots_is_a_400_naming_the_field(env: Env) -> None:
    value = "../../../../etc/passwd"
    answer = _put(env, "evil", f"name: evil\n{SIM}parameters:\n  model: {value}\n")
    _refused(answer, "parameters.model", value, os.path.realpath(env.models / value), env)
    assert _chat(env, "evil").status_code == 404  # not configured: nothing to load, nothing to copy
    _assert_the_secret_never_left(env)


def test_an_admin_put_or_patch_naming_an_absolute_file_outside_is_a_400_and_changes_nothing(env: Env) -> None:
    answer = _put(env, "evil-abs", f"name: evil-abs\n{SIM}parameters:\n  model: {env.secret}\n")
    _refused(answer, "parameters.model", str(env.secret), env.secret, env)
    assert _chat(env, "evil-abs").status_code == 404
    before = httpx.get(
        f"{env.cluster.frontend_url}/api/model-configs/good", headers=env.cluster.admin_headers
    ).json()
    patched = httpx.patch(
        f"{env.cluster.frontend_url}/api/model-configs/good",
        headers=env.cluster.admin_headers,
        json={"parameters": {"model": str(env.secret)}},
    )
    _refused(patched, "parameters.model", str(env.secret), env.secret, env)
    after = httpx.get(
        f"{env.cluster.frontend_url}/api/model-configs/good", headers=env.cluster.admin_headers
    ).json()
    assert after["config_revision"] == before["config_revision"]
    assert _chat(env, "good").status_code == 200
    _assert_the_secret_never_left(env)


@pytest.mark.parametrize(
    "extra, field, value",
    [
        ("mmproj: {secret}\n", "mmproj", "{secret}"),  # an artifact field
        ("lora_adapters:\n  - {secret}\n", "lora_adapters[0]", "{secret}"),  # a LoRA list
        (
            'options:\n  - "chat_format:gemma"\n  - "vae:/etc/passwd"\n',
            "options[1]",
            "/etc/passwd",
        ),  # an option
    ],
)
def test_every_field_that_names_a_file_is_confined(env: Env, extra: str, field: str, value: str) -> None:
    value = value.format(secret=env.secret)
    answer = _put(
        env,
        "evil-field",
        f"name: evil-field\n{SIM}parameters:\n  model: good\n" + extra.format(secret=env.secret),
    )
    _refused(answer, field, value, os.path.realpath(value), env)
    _assert_the_secret_never_left(env)


def test_attacker_variations_are_refused_naming_the_field(env: Env) -> None:
    (env.models / "sneaky").symlink_to(env.outside)  # a directory link planted in the models dir
    try:
        linked = _put(env, "evil-link", f"name: evil-link\n{SIM}parameters:\n  model: sneaky/secret.txt\n")
    finally:
        (env.models / "sneaky").unlink()
    _refused(linked, "parameters.model", "sneaky/secret.txt", env.secret, env)
    hub = _put(
        env,
        "evil-hub",
        "name: evil-hub\nbackend: simulator\nhuggingface:\n  repo: acme/tiny\n"
        "parameters:\n  model: ../../../../../../../../etc/passwd\n",
    )
    _refused(hub, "parameters.model", "../../../../../../../../etc/passwd", "/etc/passwd", env)
    nul = _put(env, "evil-nul", f'name: evil-nul\n{SIM}parameters:\n  model: "m\\0.gguf"\n')
    assert nul.status_code == 400 and nul.json()["error"]["param"] == "parameters.model"
    assert "contains a NUL byte" in nul.json()["error"]["message"]
    long = _put(env, "evil-long", f"name: evil-long\n{SIM}parameters:\n  model: /{'a/' * 3000}x\n")
    assert long.status_code == 400 and long.json()["error"]["param"] == "parameters.model"
    assert "the longest path is 4096 bytes" in long.json()["error"]["message"]
    renamed = httpx.post(
        f"{env.cluster.frontend_url}/api/model-configs/good/rename",
        json={"name": "good2"},
        headers=env.cluster.admin_headers,
    )
    assert renamed.status_code == 200, renamed.text  # a rename is validated like any edit; this one is fine
    _assert_the_secret_never_left(env)


def test_a_file_in_a_listed_root_is_served_and_staged_but_nothing_is_written_beside_it(env: Env) -> None:
    answer = _chat(env, "boot-shared")
    assert answer.status_code == 200, answer.text
    staged = [p for p in _worker_files(env) if p.name == "weights.bin"]
    assert len(staged) == 1 and staged[0].read_bytes() == (env.shared / "weights.bin").read_bytes()
    assert not hash_sidecar_path(env.shared / "weights.bin").exists()
    put = _put(env, "shared-too", f"name: shared-too\n{SIM}parameters:\n  model: {env.shared}/weights.bin\n")
    assert put.status_code == 200, put.text
    assert _chat(env, "shared-too").status_code == 200
    assert sorted(os.listdir(env.shared)) == [
        "weights.bin"
    ]  # no sidecar, no temporary file: read-only to corral
