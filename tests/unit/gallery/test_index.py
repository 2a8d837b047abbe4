"""Gallery index parsing and validation: entry fields, bounds, gallery lists, lookups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.gallery.index import (
    INDEX_MAX_BYTES,
    BackendNotFound,
    GalleryError,
    GalleryRef,
    find_entry,
    parse_galleries,
    parse_index,
    resolve_location,
)
from corral.models.names import backend_name_problem

GOOD = (
    b"""
- name: st
  alias: sentence-transformers
  uri: backends/st
  sha256: SHA256:"""
    + b"A" * 64
    + b"""
  python: {requirements: requirements.txt, find_links: [wheels], no_index: true}
"""
)


def test_an_entry_with_every_field_is_parsed() -> None:
    [entry] = parse_index(GOOD, "test")
    assert (entry.name, entry.alias, entry.uri) == ("st", "sentence-transformers", "backends/st")
    assert entry.sha256 == "a" * 64  # prefix dropped, lower-cased
    assert entry.python is not None and entry.python.find_links == ["wheels"] and entry.python.no_index


def test_json_and_a_backends_mapping_are_accepted() -> None:
    doc = json.dumps({"backends": [{"name": "x", "uri": "x.tar.gz"}]}).encode()
    assert [e.name for e in parse_index(doc, "j")] == ["x"]


@pytest.mark.parametrize(
    "entry, needle",
    [
        ({"name": "../etc", "uri": "x"}, "field 'name'"),
        ({"name": "a/b", "uri": "x"}, "field 'name'"),
        ({"name": "a\x00b", "uri": "x"}, "field 'name'"),
        ({"name": "ok", "alias": "..", "uri": "x"}, "field 'alias'"),
        ({"name": "ok"}, "field 'uri'"),
        ({"name": "ok", "uri": "x", "sha256": "abc"}, "field 'sha256'"),
        ({"name": "ok", "uri": "x", "python": {"requirements": "../../etc/passwd"}}, "python.requirements"),
        ({"name": "ok", "uri": "x", "python": {"requirements": "/etc/passwd"}}, "python.requirements"),
        ({"name": "ok", "uri": "x", "python": {"unknown": 1}}, "python.unknown"),
    ],
)
def test_an_invalid_entry_names_its_index_position_and_field(entry: dict[str, object], needle: str) -> None:
    with pytest.raises(GalleryError) as info:
        parse_index(json.dumps([{"name": "first", "uri": "f"}, entry]).encode(), "idx")
    assert "entry 1" in str(info.value) and needle in str(info.value) and "idx" in str(info.value)


@pytest.mark.parametrize("doc", [b"name: [unclosed", b"42", b"{backends: 3}"])
def test_a_malformed_index_is_refused_with_its_name(doc: bytes) -> None:
    with pytest.raises(GalleryError, match="idx"):
        parse_index(doc, "idx")


def test_a_huge_index_is_refused_unparsed() -> None:
    with pytest.raises(GalleryError, match="at most"):
        parse_index(b"#" * (INDEX_MAX_BYTES + 1), "huge")


def test_gallery_lists_parse_as_json_or_a_bare_location() -> None:
    assert parse_galleries('[{"name": "a", "url": "/x/index.yaml"}]') == [GalleryRef("a", "/x/index.yaml")]
    assert parse_galleries("https://g/index.yaml") == [
        GalleryRef("https://g/index.yaml", "https://g/index.yaml")
    ]
    assert parse_galleries("") == [] and parse_galleries("[]") == []
    for bad in ('[{"name": "a"}]', "[1]", "[not json", '[{"url": "a\u0000"}]', "[" + " " * 20000 + "]"):
        with pytest.raises(GalleryError):
            parse_galleries(bad)


def test_relative_uris_resolve_against_the_index() -> None:
    assert resolve_location("/srv/g/index.yaml", "backends/st") == "/srv/g/backends/st"
    assert resolve_location("https://h/g/index.yaml", "st.tar.gz") == "https://h/g/st.tar.gz"
    assert resolve_location("/srv/g/index.yaml", "https://o/x.zip") == "https://o/x.zip"


def test_an_unknown_backend_names_every_gallery_searched(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("- {name: one, uri: one}\n")
    (tmp_path / "b.yaml").write_text("[]\n")
    refs = [GalleryRef("first", str(tmp_path / "a.yaml")), GalleryRef("second", str(tmp_path / "b.yaml"))]
    with pytest.raises(BackendNotFound) as info:
        find_entry("two", refs, timeout_s=5)
    assert "first" in str(info.value) and "second" in str(info.value) and "'two'" in str(info.value)
    entry, ref = find_entry("one", refs, timeout_s=5)
    assert entry.name == "one" and ref.name == "first"


def test_an_unreadable_gallery_is_named_when_nothing_lists_the_backend(tmp_path: Path) -> None:
    with pytest.raises(GalleryError) as info:
        find_entry("x", [GalleryRef("gone", str(tmp_path / "missing.yaml"))], timeout_s=5)
    assert "gone" in str(info.value) and "missing.yaml" in str(info.value)


@pytest.mark.parametrize("name", ["", "..", "a/b", "a\\b", "a\x00", ".hidden", "-x", "x" * 200, "é"])
def test_backend_names_that_could_be_paths_are_refused(name: str) -> None:
    assert backend_name_problem(name) is not None


def test_plain_backend_names_are_accepted() -> None:
    for name in ("llama-cpp", "simulator", "sentencetransformers", "vllm_0.6", "x1"):
        assert backend_name_problem(name) is None
