"""Each command's settings are one frozen class whose fields are its table: typed, loaded, shown in `--help`."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from corral.cli.main import main
from corral.config.agents import AgentWorkerSettings
from corral.config.backend import BackendSettings
from corral.config.client import ActivitySettings, ClientSettings, ModelLoadSettings
from corral.config.errors import ConfigError
from corral.config.frontend import FrontendSettings
from corral.config.launchers import Ds4Settings, VllmFollowerSettings
from corral.config.nats_auth_setup import NatsAuthSetupSettings
from corral.config.settings import Setting, load, setting, settings_class, table
from corral.config.up import UpSettings
from corral.config.worker import WorkerSettings

# (command line, its settings class): every command that reads settings
COMMANDS: list[tuple[list[str], type]] = [
    (["run"], FrontendSettings),
    (["worker"], WorkerSettings),
    (["worker", "ds4-distributed"], Ds4Settings),
    (["agent-worker"], AgentWorkerSettings),
    (["up"], UpSettings),
    (["backend"], BackendSettings),
    (["nats-auth-setup"], NatsAuthSetupSettings),
    (["p2p-worker", "vllm"], VllmFollowerSettings),
    (["nodes"], ClientSettings),
    (["models"], ClientSettings),
    (["activity"], ActivitySettings),
    (["models", "load"], ModelLoadSettings),
]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100000")  # argparse wraps help at the terminal's width, hyphens included


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """`corral <argv> --help` on one line per argument, whitespace collapsed."""
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return re.sub(r"\s+", " ", capsys.readouterr().out)


@pytest.mark.parametrize("argv, settings", COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_help_lists_each_flag_with_its_env_vars_and_default(
    argv: list[str], settings: type, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(argv, capsys)
    for row in table(settings):
        assert row.flag in text
        assert row.describe().replace("%%", "%") in text, row.name  # [$ENV, ...; default: ...]


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["run"],
            "--address ADDRESS HTTP listen address of the API (host:port) [$LOCALAI_ADDRESS; "
            "default: '0.0.0.0:8080']",
        ),  # fmt: skip
        (["run"], "[$LOCALAI_AUTH_DATABASE_URL, $DATABASE_URL; required]"),
        (["run"], "[$LOCALAI_NATS_MODEL_LOAD_TIMEOUT; default: unset]"),  # None: computed per model
        (["run"], "--responses-ttl RESPONSES_TTL"),
        (["run"], "[$CORRAL_RESPONSES_TTL; default: 720h]"),  # durations as operators write them
        (["worker"], "[$LOCALAI_MODELS_PATH; default: './models']"),
        (["worker"], "[$LOCALAI_REGISTRATION_TOKEN; default: unset]"),  # a secret: never shown
        (["worker"], "[$LOCALAI_NODE_LABELS; default: {}]"),
        (["worker"], "[$LOCALAI_HEARTBEAT_INTERVAL; default: 10s]"),
        (["worker"], "--allow-unauthenticated [ALLOW_UNAUTHENTICATED]"),  # a switch: the value is optional
        (["agent-worker"], "(worker) [$LOCALAI_NATS_TLS_CA; default: unset]"),
        (["up"], "--workers WORKERS number of worker processes [no env var; default: 1]"),
        (["models", "load"], "NAME the configured model (or alias) to load [no env var; required]"),
        (["nats-auth-setup"], "[no env var; default: PosixPath('nats-auth')]"),
    ],
)
def test_help_shows_the_env_vars_and_defaults_operators_know(
    argv: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shown in help_text(argv, capsys)


def test_the_agent_worker_has_the_node_settings_of_a_worker_but_sysfs() -> None:
    worker = [row.name for row in table(WorkerSettings)]
    agent = [row.name for row in table(AgentWorkerSettings)]
    node = worker[worker.index("nats_jwt") : worker.index("sysfs_root")]
    assert agent[-len(node) :] == node and "sysfs_root" not in agent


def test_a_loaded_object_is_typed_and_frozen() -> None:
    up = load(UpSettings, "corral up", "", ["--port", "9000", "--no-default-models", "--data-dir", "~/x"])
    assert up.port == 9000 and up.no_default_models is True and up.workers == 1
    assert up.data_dir == Path("~/x").expanduser()
    with pytest.raises(dataclasses.FrozenInstanceError):
        up.port = 1  # type: ignore[misc]


def test_the_default_address_is_a_host_and_port() -> None:
    frontend = load(
        FrontendSettings,
        "corral run",
        "",
        ["--nats-url", "nats://n:4222", "--database-url", "postgresql://u@h/db"],
        environ={},
    )
    assert frontend.address == ("0.0.0.0", 8080)


def test_mutable_defaults_are_not_shared_between_objects() -> None:
    first = WorkerSettings(register_to="http://f:8080", nats_url="nats://n:4222")
    second = WorkerSettings(register_to="http://f:8080", nats_url="nats://n:4222")
    assert first.node_labels == {} and first.node_labels is not second.node_labels


def _expected_type(row: Setting) -> object:
    """The parser's return type, `| None` when the default is None (what the field must be declared as)."""
    returned = typing.get_type_hints(row.parse)["return"]
    return returned | None if row.default is None and not row.required else returned


@pytest.mark.parametrize("settings", list(dict.fromkeys(settings for _argv, settings in COMMANDS)))
def test_each_field_is_declared_with_its_parsers_type(settings: type) -> None:
    declared = typing.get_type_hints(settings)
    mismatched = {
        row.name: (declared[row.name], _expected_type(row))
        for row in table(settings)
        if declared[row.name] != _expected_type(row)
    }
    assert not mismatched


def test_positional_settings_and_bad_values_name_the_argument() -> None:
    backend = load(BackendSettings, "corral backend", "", ["simulator", "--addr", "127.0.0.1:1"])
    assert (backend.name, backend.addr, backend.log_level) == ("simulator", "127.0.0.1:1", "INFO")
    with pytest.raises(ConfigError, match="missing required setting NAME"):
        load(BackendSettings, "corral backend", "", ["--addr", "127.0.0.1:1"])
    with pytest.raises(ConfigError, match="--workers"):
        load(UpSettings, "corral up", "", ["--workers", "-1"])


def test_a_group_mixed_in_follows_the_class_own_fields_and_a_name_keeps_its_first_place() -> None:
    @settings_class
    class Base:
        shared: str = setting("--shared", default="base", help="from the base")
        other: str = setting("--other", default="", help="the base's second")

    @settings_class
    class Command(Base):
        own: str = setting("--own", "X_OWN", default="", help="the command's own")
        shared: str = setting("--shared", default="command", help="overridden")

    assert [(row.name, row.default) for row in table(Command)] == [
        ("own", ""),
        ("shared", "command"),
        ("other", ""),
    ]
    assert Command().shared == "command"


def test_a_field_without_a_setting_is_refused() -> None:
    with pytest.raises(TypeError, match="Loose.plain is not declared with setting"):

        @settings_class
        class Loose:
            plain: str = "x"

    with pytest.raises(TypeError, match="--both needs either a default or required=True"):
        setting("--both", default="", required=True)  # type: ignore[call-overload]
