"""The operator commands' settings: frontend URL checked, key secret, defaults."""

from __future__ import annotations

import pytest

from corral.config.client import ClientSettings, ModelLoadSettings, parse_frontend_url
from corral.config.errors import ConfigError
from corral.config.settings import build_parser, resolve


def test_defaults_and_env() -> None:
    settings = resolve(ClientSettings, {}, {"CORRAL_URL": "http://10.0.0.5:9090/", "LOCALAI_API_KEY": "k"})
    assert (settings.url, settings.api_key, settings.json) == ("http://10.0.0.5:9090", "k", False)
    loading = resolve(ModelLoadSettings, {"model": "m"}, {})
    assert (loading.model, loading.url, loading.follow) == ("m", "http://127.0.0.1:8080", False)
    with pytest.raises(ConfigError, match="missing required setting NAME"):
        resolve(ModelLoadSettings, {}, {})


@pytest.mark.parametrize("raw", ["10.0.0.5:8080", "ftp://x", "http://", ""])
def test_a_url_that_is_not_a_frontend_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        parse_frontend_url(raw)
    with pytest.raises(ConfigError, match="--url / \\$CORRAL_URL"):
        resolve(ClientSettings, {"url": raw or " "}, {})


def test_the_key_is_never_shown_in_help() -> None:
    text = build_parser(ClientSettings, "corral nodes", "").format_help()
    assert "--api-key" in text and "CORRAL_API_KEY" in text and "default: unset" in text
