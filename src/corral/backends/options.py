"""Parse `ModelOptions.Options` entries (`key:value` strings) into typed settings.

The worker forwards a model config's `options:` list verbatim, e.g.
`["chat_format:gemma", "load_time_s:1.5", "load_fail:disk on fire: sector 7"]`.
Rules: the key is everything before the first `:` (stripped), the value everything after
it (stripped; it may itself contain `:`); an entry without `:` is a flag meaning `true`;
blank entries are skipped; a repeated key keeps its last value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class OptionError(ValueError):
    """An option value that cannot be used; the message names the option and the fix."""


def parse_options(entries: Iterable[str]) -> dict[str, str]:
    """`["a:1", "flag", "msg:x: y"]` -> `{"a": "1", "flag": "true", "msg": "x: y"}`."""
    options: dict[str, str] = {}
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        key, sep, value = entry.partition(":")
        key = key.strip()
        if not key:
            raise OptionError(f"option {raw!r} has no key; write options as 'key:value'")
        options[key] = value.strip() if sep else "true"
    return options


def option_float(
    options: Mapping[str, str], key: str, default: float, *, min_value: float | None = 0.0
) -> float:
    """A number option (e.g. seconds). Rejects non-numbers, NaN/inf and values below `min_value`."""
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option {key} must be a number, got {raw!r} (write e.g. '{key}:0.5')") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise OptionError(f"option {key} must be a finite number, got {raw!r}")
    if min_value is not None and value < min_value:
        raise OptionError(f"option {key} must be >= {min_value:g}, got {raw!r}")
    return value


def option_int(options: Mapping[str, str], key: str, default: int, *, min_value: int | None = 0) -> int:
    """A whole-number option. Rejects fractions, words and values below `min_value`."""
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(
            f"option {key} must be a whole number, got {raw!r} (write e.g. '{key}:{default}')"
        ) from None
    if min_value is not None and value < min_value:
        raise OptionError(f"option {key} must be >= {min_value}, got {raw!r}")
    return value


def option_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    """A true/false option: accepts 1/0, true/false, yes/no, on/off (any case)."""
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    word = raw.lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise OptionError(f"option {key} must be true or false, got {raw!r}")


def unknown_options(options: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """Keys this engine does not use, sorted (callers log them; they are not an error)."""
    return sorted(set(options) - set(known))
