"""The worker's ledger of ephemeral request inputs: reservations, the two limits and their defaults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from corral.staging.ephemeral_ledger import (
    RESERVATION_ABANDON_AFTER_S,
    EphemeralLedger,
    EphemeralLimits,
    request_dir_of,
    resolve_ephemeral_key,
)
from corral.staging.errors import InputStorageFull, KeyEscapesDirectory
from corral.staging.request_inputs import RequestInputs, safe_input_name

GiB = 1 << 30
ROOT = Path("/srv/staging/ephemeral")
KEY_A = "ephemeral/audio/abcd1234/clip.wav"
KEY_B = "ephemeral/audio/ffff0000/other.wav"


def _ledger(
    byte_limit: int = 1000, min_free: int = 100, free: int = 10_000, clock: Callable[[], float] = lambda: 0.0
) -> EphemeralLedger:
    return EphemeralLedger(
        ROOT, EphemeralLimits(byte_limit, min_free), free_bytes=lambda _path: free, clock=clock
    )


@pytest.mark.parametrize(
    "fs_bytes, byte_limit, min_free",
    [
        (1000 * GiB, 100 * GiB, 10 * GiB),  # large volume: a tenth for inputs, headroom capped at 10 GiB
        (100 * GiB, 10 * GiB, 5 * GiB),  # a twentieth kept free
        (10 * GiB, GiB, GiB),  # headroom never below 1 GiB
        (1 * GiB, 256 << 20, GiB),  # budget never below 256 MiB (the headroom still protects a tiny volume)
    ],
)
def test_zero_settings_select_filesystem_based_defaults(
    fs_bytes: int, byte_limit: int, min_free: int
) -> None:
    limits = EphemeralLimits.resolve(0, 0, ROOT, total_bytes=lambda _path: fs_bytes)
    assert (limits.byte_limit, limits.min_free_bytes) == (byte_limit, min_free)


def test_positive_settings_are_used_as_given_and_only_a_zero_one_is_defaulted() -> None:
    assert EphemeralLimits.resolve(5, 7, ROOT, total_bytes=lambda _path: 0) == EphemeralLimits(5, 7)
    assert EphemeralLimits.resolve(5, 0, ROOT, total_bytes=lambda _path: 100 * GiB) == EphemeralLimits(
        5, 5 * GiB
    )


def test_an_input_past_the_byte_limit_is_refused_naming_the_setting_and_the_numbers() -> None:
    ledger = _ledger(byte_limit=1000)
    ledger.reserve(KEY_A, 600)
    with pytest.raises(InputStorageFull) as refused:
        ledger.reserve(KEY_B, 500)
    assert refused.value.setting == "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT"
    assert str(refused.value) == (
        "request input 'ephemeral/audio/ffff0000/other.wav' (500 bytes) refused before it was written: the "
        "worker's ephemeral request inputs would reach 1100 bytes (600 held by 1 request(s) not yet released), "
        "over LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT=1000 (1.0 kB); retry when requests finish, raise "
        "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT on the worker, or add workers"
    )
    assert not ledger.holds(KEY_B)


def test_an_input_that_would_eat_the_free_space_headroom_is_refused_counting_what_accepted_inputs_still_write() -> (
    None
):
    ledger = _ledger(byte_limit=10_000, min_free=100, free=1000)
    ledger.reserve(KEY_A, 500)  # accepted, not written yet: the filesystem does not show it
    with pytest.raises(InputStorageFull) as refused:
        ledger.reserve(KEY_B, 450)  # 1000 free - 500 pending - 450 = 50 < 100
    assert refused.value.setting == "LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES"
    assert (
        "it would leave 50 bytes free on the filesystem of '/srv/staging/ephemeral' (1000 free now, 500 "
        "still to be written by accepted inputs), below LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES=100"
        in str(refused.value)
    )
    ledger.settle(KEY_A, on_disk=True)  # landed: the free-space probe shows it from now on
    ledger.reserve(KEY_B, 450)


def test_a_landed_input_counts_against_the_byte_limit_until_it_is_released() -> None:
    ledger = _ledger(byte_limit=1000)
    ledger.reserve(KEY_A, 800)
    ledger.settle(KEY_A, on_disk=True)
    assert ledger.active_request_dirs() == {"audio/abcd1234"}
    with pytest.raises(InputStorageFull):
        ledger.reserve(KEY_B, 300)
    assert ledger.release(KEY_A, removed_bytes=800) == 800
    ledger.reserve(KEY_B, 300)
    assert ledger.active_request_dirs() == {"audio/ffff0000"}


def test_a_failed_write_drops_its_reservation() -> None:
    ledger = _ledger()
    ledger.reserve(KEY_A, 900)
    ledger.settle(KEY_A, on_disk=False)
    assert ledger.held_bytes() == 0 and ledger.active_request_dirs() == set()


def test_writing_a_key_again_replaces_its_reservation_instead_of_adding_to_it() -> None:
    ledger = _ledger(byte_limit=1000)
    ledger.reserve(KEY_A, 900)
    ledger.reserve(KEY_A, 950)
    assert ledger.held_bytes() == 950


def test_bytes_found_on_disk_without_a_reservation_count_until_released() -> None:
    ledger = _ledger(byte_limit=1000)
    ledger.count_unreserved({"audio/old00000": 700})  # an earlier run's input, kept by the sweep
    with pytest.raises(InputStorageFull, match=r"700 held by 1 request\(s\)"):
        ledger.reserve(KEY_A, 400)
    ledger.release("ephemeral/audio/old00000/x.wav", removed_bytes=700)
    ledger.reserve(KEY_A, 400)


def test_a_reservation_nobody_released_for_hours_stops_protecting_its_directory() -> None:
    now = [0.0]
    ledger = _ledger(clock=lambda: now[0])
    ledger.reserve(KEY_A, 10)
    now[0] = RESERVATION_ABANDON_AFTER_S - 1
    assert ledger.drop_abandoned() == []
    now[0] = RESERVATION_ABANDON_AFTER_S + 1
    assert ledger.drop_abandoned() == [KEY_A]
    assert ledger.active_request_dirs() == set()


@pytest.mark.parametrize(
    "key",
    [
        "ephemeral",  # the root itself
        "ephemeral/audio",  # no request id
        "ephemeral/audio/abcd1234",  # no file name: the request directory itself
    ],
)
def test_an_ephemeral_key_must_name_a_file_in_a_request_directory(key: str) -> None:
    with pytest.raises(
        KeyEscapesDirectory, match="an ephemeral key must be 'ephemeral/<category>/<request id>/<name>'"
    ):
        request_dir_of(key)


@pytest.mark.parametrize(
    "key, message",
    [
        ("ephemeral/../models/x", "key has a '..' path segment"),
        ("ephemeral/audio/abcd1234/../../../models/x.gguf", "key has a '..' path segment"),
        ("/srv/models/x.gguf", "an ephemeral key must be"),
    ],
)
def test_ephemeral_keys_never_resolve_into_the_models_tree(key: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(KeyEscapesDirectory, match=message):
        resolve_ephemeral_key(key, tmp_path / "models")


def test_an_ephemeral_key_through_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (tmp_path / "staging" / "ephemeral" / "audio").mkdir(parents=True)
    (tmp_path / "staging" / "elsewhere").mkdir()
    (tmp_path / "staging" / "ephemeral" / "audio" / "abcd1234").symlink_to(tmp_path / "staging" / "elsewhere")
    with pytest.raises(KeyEscapesDirectory, match="outside the ephemeral root"):
        resolve_ephemeral_key("ephemeral/audio/abcd1234/x.wav", models)


@pytest.mark.parametrize(
    "filename, name",
    [
        ("clip.wav", "clip.wav"),
        ("C:\\Users\\me\\My Clip (1).wav", "My_Clip_1_.wav"),  # a browser's full Windows path: its basename
        ("../../etc/passwd", "passwd"),
        ("..", "input"),
        (".hidden.png", "hidden.png"),
        ("weights.sha256", "weights.sha256.bin"),  # the worker's sidecar names are reserved
        ("", "input"),
        ("x" * 300 + ".mp3", "x" * 96 + ".mp3"),
    ],
)
def test_a_client_file_name_becomes_one_safe_key_segment(filename: str, name: str) -> None:
    assert safe_input_name(filename) == name


def test_two_inputs_of_one_name_get_distinct_keys_below_the_request_directory() -> None:
    inputs = RequestInputs(http=None, worker_http_address="w:1", token="t", request_id="abcd1234")  # type: ignore[arg-type]
    first = inputs.key_for("image", "cat.png")
    inputs.keys.append(first)
    assert (first, inputs.key_for("image", "cat.png")) == (
        "ephemeral/image/abcd1234/cat.png",
        "ephemeral/image/abcd1234/cat-2.png",
    )
    with pytest.raises(ValueError, match="input category 'Audio/x' must be"):
        inputs.key_for("Audio/x", "a.wav")
