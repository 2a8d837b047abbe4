"""Declarative settings: each command's settings are one frozen class whose body is its table.

A field is declared with `setting(flag, env, default=..., parse=..., help=...)`: the attribute is the
setting's name, the annotation its type (mypy checks it against the parser and the default), and the
field carries the flag, env vars, parser and help. A group of settings several commands share is a class
of its own, mixed in as a base. A command's table (the order of its `--help`) is its class's own fields,
then each base's table in the order the bases are listed; a name seen twice keeps its first place.

Precedence: command-line flag, then the first env var that is set, then the default. A
missing required setting or a value that does not parse raises ConfigError naming the flag
and env var, so the process stops with one line and no traceback.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, dataclass_transform, overload

from corral.config.errors import ConfigError
from corral.config.parse import (
    format_duration_s,
    parse_duration_s,
    parse_host_port,
    parse_positive_duration_s,
)

T = TypeVar("T")
C = TypeVar("C")

SETTING = "corral.setting"  # the field metadata key holding a field's Setting
_NO_DEFAULT: Any = object()


def _identity(raw: str) -> str:
    return raw


@dataclass(frozen=True)
class Setting:
    name: str
    flag: str
    env: tuple[str, ...] = ()
    default: Any = None
    parse: Callable[[str], Any] = _identity
    help: str = ""
    required: bool = False
    is_switch: bool = False  # a boolean flag that may be given without a value
    secret: bool = False  # never shown in --help defaults or logs
    positional: bool = False  # an argument without a flag (`flag` is then its metavar, e.g. NAME)

    def describe(self) -> str:
        env = ", ".join(f"${e}" for e in self.env) or "no env var"
        if self.required:
            default = "required"
        elif self.secret:
            default = "default: unset"
        elif isinstance(self.default, float) and self.parse in (parse_duration_s, parse_positive_duration_s):
            default = f"default: {format_duration_s(self.default)}"
        elif isinstance(self.default, tuple) and self.parse is parse_host_port:
            default = "default: {!r}".format("{}:{}".format(*self.default))
        else:
            default = f"default: {self.default!r}" if self.default not in (None, "", ()) else "default: unset"
        return f"{self.help} [{env}; {default}]".replace("%", "%%")  # argparse formats help with %


@overload
def setting(
    flag: str,
    env: str | tuple[str, ...] = (),
    *,
    default: T,
    parse: Callable[[str], T],
    help: str = "",
    is_switch: bool = False,
    secret: bool = False,
) -> T: ...


@overload
def setting(
    flag: str,
    env: str | tuple[str, ...] = (),
    *,
    default: str,
    help: str = "",
    secret: bool = False,
) -> str: ...


@overload
def setting(
    flag: str,
    env: str | tuple[str, ...] = (),
    *,
    parse: Callable[[str], T],
    required: Literal[True],
    help: str = "",
    positional: bool = False,
) -> T: ...


@overload
def setting(
    flag: str,
    env: str | tuple[str, ...] = (),
    *,
    required: Literal[True],
    help: str = "",
    positional: bool = False,
) -> str: ...


def setting(
    flag: str,
    env: str | tuple[str, ...] = (),
    *,
    default: Any = _NO_DEFAULT,
    parse: Callable[[str], Any] = _identity,
    help: str = "",
    required: bool = False,
    is_switch: bool = False,
    secret: bool = False,
    positional: bool = False,
) -> Any:
    """One field of a settings class: its flag (or metavar, positional), env vars, default or `required`,
    parser (the raw string to the field's type; ValueError names what is wrong) and help."""
    if required == (default is not _NO_DEFAULT):
        raise TypeError(f"setting {flag} needs either a default or required=True")
    spec = Setting(
        "",
        flag,
        (env,) if isinstance(env, str) else env,
        None if required else default,
        parse,
        help,
        required=required,
        is_switch=is_switch,
        secret=secret,
        positional=positional,
    )
    metadata = {SETTING: spec}
    if required:
        return dataclasses.field(metadata=metadata)
    if type(default).__hash__ is None:  # a mutable default ({}): each object gets its own copy
        return dataclasses.field(default_factory=functools.partial(copy.copy, default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


_TABLES: dict[type, tuple[Setting, ...]] = {}


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(setting,))
def settings_class(cls: type[C]) -> type[C]:
    """Make `cls` a frozen, keyword-only dataclass of settings and record its table."""
    made = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    by_name: dict[str, dataclasses.Field[Any]] = made.__dict__["__dataclass_fields__"]
    rows: dict[str, Setting] = {}
    for name in made.__dict__.get("__annotations__", {}):
        spec = by_name[name].metadata.get(SETTING)
        if not isinstance(spec, Setting):
            raise TypeError(f"{made.__name__}.{name} is not declared with setting()")
        rows[name] = dataclasses.replace(spec, name=name)
    for base in made.__bases__:
        for row in _TABLES.get(base, ()):
            rows.setdefault(row.name, row)
    if missing := set(by_name) - set(rows):
        raise TypeError(f"{made.__name__} has fields outside its settings table: {sorted(missing)}")
    _TABLES[made] = tuple(rows.values())
    return made


def table(settings: type) -> tuple[Setting, ...]:
    """The settings of a settings class, in `--help` order."""
    try:
        return _TABLES[settings]
    except KeyError:
        raise TypeError(f"{settings.__name__} is not a @settings_class") from None


def build_parser(
    settings: type,
    prog: str,
    description: str,
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    parser = parser_class(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for row in table(settings):
        if row.positional:
            parser.add_argument(row.name, metavar=row.flag, nargs="?", default=None, help=row.describe())
        elif row.is_switch:
            parser.add_argument(
                row.flag, dest=row.name, nargs="?", const="true", default=None, help=row.describe()
            )
        else:
            parser.add_argument(
                row.flag,
                dest=row.name,
                default=None,
                help=row.describe(),
                metavar=row.flag.lstrip("-").upper().replace("-", "_"),
            )
    return parser


def resolve(settings: type[C], cli_values: Mapping[str, str | None], environ: Mapping[str, str]) -> C:
    """The settings object from parsed command-line values (by name) and the environment."""
    values: dict[str, Any] = {}
    for row in table(settings):
        raw, source = cli_values.get(row.name), row.flag
        if raw is None:
            for env in row.env:
                if environ.get(env, "") != "":
                    raw, source = environ[env], f"${env}"
                    break
        label = " / ".join([row.flag, *(f"${e}" for e in row.env)])
        if raw is None:
            if row.required:
                raise ConfigError(f"missing required setting {label}: {row.help}")
            continue  # the field's default
        try:
            values[row.name] = row.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"invalid {label} (from {source}): {exc}") from None
    return settings(**values)


def load(
    settings: type[C],
    prog: str,
    description: str,
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> C:
    """Parse `argv` for the command `prog` and resolve its settings object (flag > env var > default)."""
    parser = build_parser(settings, prog, description, parser_class)
    namespace = parser.parse_args(list(argv))
    return resolve(settings, vars(namespace), os.environ if environ is None else environ)
