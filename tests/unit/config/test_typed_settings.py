"""Each command's settings object is typed and frozen, and generated from its table (the one source of truth)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corral.config import commands, typed
from corral.config.backend import BACKEND_SETTINGS
from corral.config.errors import ConfigError
from corral.config.settings import load_typed
from corral.config.up import UP_SETTINGS


def test_the_generated_settings_classes_are_current() -> None:
    stale = [
        name
        for name, _command, ref in typed.COMMANDS
        if [f.name for f in dataclasses.fields(getattr(commands, name))] != [s.name for s in typed.table(ref)]
    ]
    assert not stale and typed.TARGET.read_text() == typed.render(), (
        f"config/commands.py is stale for {stale or 'a field type'}: run `python -m corral.config.typed`"
    )


def test_a_loaded_object_is_typed_and_frozen() -> None:
    up = load_typed(
        commands.UpSettings,
        "corral up",
        "",
        UP_SETTINGS,
        ["--port", "9000", "--no-default-models", "--data-dir", "~/x"],
    )
    assert up.port == 9000 and up.no_default_models is True and up.workers == 1
    assert up.data_dir == Path("~/x").expanduser()
    with pytest.raises(dataclasses.FrozenInstanceError):
        up.port = 1  # type: ignore[misc]


def test_field_types_follow_the_parsers() -> None:
    types = {s.name: typed.field_type(s) for s in UP_SETTINGS}
    assert types == {
        "port": "int",
        "host": "str",
        "workers": "int",
        "data_dir": "Path | None",
        "database_url": "str | None",
        "nats_url": "str | None",
        "worker_base_port": "int",
        "models_path": "Path | None",
        "no_default_models": "bool",
    }


def test_positional_settings_and_bad_values_name_the_argument() -> None:
    backend = load_typed(
        commands.BackendSettings,
        "corral backend",
        "",
        BACKEND_SETTINGS,
        ["simulator", "--addr", "127.0.0.1:1"],
    )
    assert (backend.name, backend.addr, backend.log_level) == ("simulator", "127.0.0.1:1", "INFO")
    with pytest.raises(ConfigError, match="missing required setting NAME"):
        load_typed(
            commands.BackendSettings, "corral backend", "", BACKEND_SETTINGS, ["--addr", "127.0.0.1:1"]
        )
    with pytest.raises(ConfigError, match="--workers"):
        load_typed(commands.UpSettings, "corral up", "", UP_SETTINGS, ["--workers", "-1"])
