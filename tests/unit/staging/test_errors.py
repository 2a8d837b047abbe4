"""Staging errors: each message names what failed, where, and the HTTP status or its absence."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.staging.errors import (
    HubDownloadFailed,
    InputStorageFull,
    KeyEscapesDirectory,
    ObjectStoreFailed,
    RequestInputFailed,
    ReservedKey,
    StagingError,
    StagingFailed,
)


def test_a_bad_key_quotes_the_key_and_the_reason() -> None:
    error = KeyEscapesDirectory("../etc/passwd", "'..' segment")
    assert str(error) == "invalid storage key '../etc/passwd': '..' segment"
    assert (error.key, error.reason) == ("../etc/passwd", "'..' segment")


def test_a_reserved_key_is_a_bad_key() -> None:
    error = ReservedKey("models/m/a.gguf.sha256", "a hash sidecar")
    assert isinstance(error, KeyEscapesDirectory) and "a hash sidecar" in str(error)


def test_a_key_with_control_characters_is_quoted_not_printed_raw() -> None:
    assert "\\x00" in str(KeyEscapesDirectory("a\x00b", "NUL"))


@pytest.mark.parametrize(("status", "shown"), [(413, "(HTTP 413)"), (None, "(no HTTP response)")])
def test_a_failed_upload_names_file_key_worker_and_status(status: int | None, shown: str) -> None:
    error = StagingFailed(
        local_path=Path("/models/m.gguf"),
        key="models/m/m.gguf",
        worker_url="http://w:50050",
        status=status,
        message="too big",
    )
    assert str(error) == (
        f"staging '/models/m.gguf' as key 'models/m/m.gguf' to worker http://w:50050 failed {shown}: too big"
    )
    assert (error.status, error.message) == (status, "too big")


def test_a_hub_failure_names_the_repo() -> None:
    error = HubDownloadFailed("org/model", 401, "gated: set HF_TOKEN")
    assert str(error) == "Hugging Face repo 'org/model': gated: set HF_TOKEN"
    assert error.status == 401


def test_full_input_storage_is_a_transient_503_naming_its_setting() -> None:
    error = InputStorageFull("over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT", setting="LOCALAI_X", key="inputs/a")
    assert (error.client_status, error.retry_after_s) == (503, 5)
    assert (str(error), error.setting, error.key) == (
        "over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT",
        "LOCALAI_X",
        "inputs/a",
    )


@pytest.mark.parametrize(("status", "shown"), [(401, "(HTTP 401)"), (None, "(no HTTP response)")])
def test_a_failed_request_input_names_key_worker_and_status(status: int | None, shown: str) -> None:
    error = RequestInputFailed(key="inputs/x", worker_url="http://w:50050", status=status, message="token")
    assert str(error) == f"request input 'inputs/x' on worker http://w:50050 {shown}: token"


def test_every_staging_failure_is_caught_as_one() -> None:
    errors: list[Exception] = [
        KeyEscapesDirectory("k", "r"),
        ReservedKey("k", "r"),
        StagingFailed(local_path=Path("p"), key="k", worker_url="u", status=None, message="m"),
        HubDownloadFailed("r", None, "m"),
        ObjectStoreFailed("bucket refused"),
        InputStorageFull("m", setting="", key="k"),
        RequestInputFailed(key="k", worker_url="u", status=None, message="m"),
    ]
    assert all(isinstance(e, StagingError) for e in errors)
