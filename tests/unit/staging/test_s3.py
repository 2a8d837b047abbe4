"""staging/s3: the object-storage settings, off without a URL, keys set together."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from corral.config.errors import ConfigError
from corral.staging.s3 import StorageConfig
from support.rows import present


def _storage(**overrides: object) -> SimpleNamespace:
    values = dict(
        storage_url="http://s3:9000",
        storage_bucket="localai",
        storage_region="",
        storage_access_key="a",
        storage_secret_key="s",
    )
    return SimpleNamespace(**{**values, **overrides})


def test_storage_config_is_off_without_a_url_and_defaults_the_region() -> None:
    assert StorageConfig.from_settings(_storage(storage_url="")) is None
    assert present(StorageConfig.from_settings(_storage())).region == "us-east-1"


def test_storage_keys_must_be_set_together() -> None:
    with pytest.raises(ConfigError, match="must be set together"):
        StorageConfig.from_settings(_storage(storage_secret_key=""))
