from __future__ import annotations

import pytest

from corral.config.errors import ConfigError
from corral.config.frontend import FrontendSettings
from corral.config.parse import format_duration_s, parse_duration_s, parse_host_port
from corral.config.settings import build_parser, load, table
from corral.config.worker import WorkerSettings

REQUIRED = ["--nats-url", "nats://127.0.0.1:4222", "--database-url", "postgresql://u@h/db"]


@pytest.mark.parametrize(
    "raw, seconds",
    [
        ("10s", 10.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("90", 90.0),
        ("1.5s", 1.5),
    ],
)
def test_durations_parse_go_style_and_bare_seconds(raw: str, seconds: float) -> None:
    assert parse_duration_s(raw) == seconds


@pytest.mark.parametrize("raw", ["", "ten", "5x", "m5", "5m junk"])
def test_malformed_durations_are_rejected(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_s(raw)


def test_durations_format_as_operators_write_them() -> None:
    assert [format_duration_s(s) for s in (0.25, 90, 300, 5400)] == ["250ms", "1m30s", "5m", "1h30m"]


def test_flag_wins_over_env_and_env_over_default() -> None:
    env = {
        "LOCALAI_NATS_URL": "nats://env:4222",
        "DATABASE_URL": "postgres://u@h/db",
        "LOCALAI_MODEL_LOAD_WAIT": "0",
    }
    settings = load(FrontendSettings, "corral run", "", ["--nats-url", "nats://flag:4222"], env)
    assert settings.nats_url == "nats://flag:4222"
    assert settings.database_url == "postgres://u@h/db"  # alias of LOCALAI_AUTH_DATABASE_URL
    assert settings.model_load_wait_s == 0.0
    assert settings.backend_install_timeout_s == 900.0


def test_missing_required_setting_names_flag_and_env_var() -> None:
    with pytest.raises(ConfigError) as info:
        load(FrontendSettings, "corral run", "", ["--nats-url", "nats://x:4222"], {})
    assert "--database-url / $LOCALAI_AUTH_DATABASE_URL / $DATABASE_URL" in str(info.value)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--database-url", "mysql://x/db"], "is not a PostgreSQL URL"),
        (["--nats-url", "http://x"], "is not a NATS URL"),
        (["--model-load-wait", "soon"], "is not a duration"),
        (["--address", "localhost"], "is not host:port"),
    ],
)
def test_malformed_setting_is_one_line_naming_the_setting(argv: list[str], needle: str) -> None:
    merged = dict(zip(REQUIRED[::2], REQUIRED[1::2], strict=True))
    merged.update(dict(zip(argv[::2], argv[1::2], strict=True)))
    with pytest.raises(ConfigError) as info:
        load(FrontendSettings, "corral run", "", [x for kv in merged.items() for x in kv], {})
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert argv[0] in str(info.value)


def test_switch_flags_work_without_a_value() -> None:
    settings = load(FrontendSettings, "corral run", "", [*REQUIRED, "--auto-approve-nodes"], {})
    assert settings.auto_approve_nodes is True


@pytest.mark.parametrize("settings", [FrontendSettings, WorkerSettings])
def test_help_lists_every_flag_with_its_env_var(settings: type) -> None:
    text = build_parser(settings, "corral", "").format_help()
    for setting in table(settings):
        assert setting.flag in text
        for env in setting.env:
            assert f"${env}" in text


def test_help_never_shows_the_registration_token() -> None:
    settings = load(
        WorkerSettings,
        "corral worker",
        "",
        ["--register-to", "http://f:8080", "--nats-url", "nats://n:4222"],
        {"LOCALAI_REGISTRATION_TOKEN": "s3cret"},
    )
    assert settings.registration_token == "s3cret"
    assert "s3cret" not in build_parser(WorkerSettings, "corral worker", "").format_help()


def test_host_port_parses_empty_host_as_all_interfaces() -> None:
    assert parse_host_port(":8080") == ("", 8080)


def test_prefix_cache_routing_settings_default_to_the_reference_and_read_the_spec_names() -> None:
    defaults = load(FrontendSettings, "corral run", "", REQUIRED, {})
    assert (defaults.prefix_cache, defaults.prefix_cache_ttl_s, defaults.prefix_index_max_blocks) == (
        True,
        300.0,
        100_000,
    )
    env = {
        "LOCALAI_DISTRIBUTED_PREFIX_CACHE": "false",
        "LOCALAI_DISTRIBUTED_PREFIX_CACHE_TTL": "90s",
        "CORRAL_PREFIX_INDEX_MAX_BLOCKS": "5000",
    }
    custom = load(FrontendSettings, "corral run", "", REQUIRED, env)
    assert (custom.prefix_cache, custom.prefix_cache_ttl_s, custom.prefix_index_max_blocks) == (
        False,
        90.0,
        5000,
    )
    with pytest.raises(ConfigError, match="CORRAL_PREFIX_INDEX_MAX_BLOCKS"):
        load(FrontendSettings, "corral run", "", REQUIRED, {"CORRAL_PREFIX_INDEX_MAX_BLOCKS": "0"})


def test_backend_prestart_defaults_to_llama_cpp_and_an_empty_value_means_none() -> None:
    required = ["--register-to", "http://f:8080", "--nats-url", "nats://n:4222"]
    assert load(WorkerSettings, "corral worker", "", required, {}).backend_prestart == ("llama-cpp",)
    assert (
        load(WorkerSettings, "corral worker", "", [*required, "--backend-prestart="], {}).backend_prestart
        == ()
    )
    env = {"CORRAL_BACKEND_PRESTART": " llama-cpp , whisper,llama-cpp"}
    assert load(WorkerSettings, "corral worker", "", required, env).backend_prestart == (
        "llama-cpp",
        "whisper",
    )


@pytest.mark.parametrize("raw", ["../etc", "a/b", ",".join(f"b{i}" for i in range(9))])
def test_backend_prestart_refuses_paths_and_long_lists_naming_the_flag(raw: str) -> None:
    required = ["--register-to", "http://f:8080", "--nats-url", "nats://n:4222"]
    with pytest.raises(ConfigError, match="--backend-prestart"):
        load(WorkerSettings, "corral worker", "", [*required, f"--backend-prestart={raw}"], {})


def test_worker_load_defaults_and_capability_read_their_env_vars_and_refuse_bad_values() -> None:
    required = ["--register-to", "http://f:8080", "--nats-url", "nats://n:4222"]
    defaults = load(WorkerSettings, "corral worker", "", required, {})
    assert (defaults.threads, defaults.context_size, defaults.capability) == (0, 0, "")
    env = {
        "LOCALAI_THREADS": "4",
        "LOCALAI_CONTEXT_SIZE": "8192",
        "LOCALAI_FORCE_META_BACKEND_CAPABILITY": "metal",
    }
    custom = load(WorkerSettings, "corral worker", "", required, env)
    assert (custom.threads, custom.context_size, custom.capability) == (4, 8192, "metal")
    for bad in (
        {"LOCALAI_THREADS": "-1"},
        {"LOCALAI_CONTEXT_SIZE": "2147483648"},
        {"LOCALAI_FORCE_META_BACKEND_CAPABILITY": "Nvidia CUDA"},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            load(WorkerSettings, "corral worker", "", required, bad)
