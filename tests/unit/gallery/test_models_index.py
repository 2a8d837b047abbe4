"""Model gallery indexes and install plans: every hostile file name, uri and index shape is refused with a
message naming the field, before anything is fetched or written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from corral.gallery.index import GalleryError, GalleryRef
from corral.gallery.models_index import (
    EXPANDED_NODES_MAX,
    LocationRefused,
    base_config_location,
    configured_galleries,
    file_location,
    file_name_problem,
    gallery_roots,
    parse_model_index,
)
from corral.gallery.models_install import (
    InstallError,
    PlannedFile,
    download_file,
    model_config,
    plan_files,
)

MAX = 1 << 20


@pytest.mark.parametrize(
    "name",
    [
        "",
        "../x.bin",
        "a/b.bin",
        "/etc/passwd",
        "a\\b.bin",
        "x\x00.bin",
        ".hidden",
        "..",
        "a" * 256,
        "m.yaml",
        "m.YML",
        "tab\tname",
    ],
)
def test_file_names_that_are_not_plain_names_are_refused(name: str) -> None:
    assert file_name_problem(name) is not None


def test_plain_file_names_pass() -> None:
    assert file_name_problem("phi-2.Q4_K_M.gguf") is None
    assert file_name_problem("é" * 127) is None  # 254 bytes
    assert file_name_problem("é" * 128) is not None  # 256 bytes: past the file system's limit


def _index(tmp_path: Path, entries: object) -> GalleryRef:
    path = tmp_path / "index.yaml"
    path.write_text(yaml.safe_dump(entries))
    return GalleryRef("t", str(path))


def test_a_bad_index_names_the_gallery_entry_and_field(tmp_path: Path) -> None:
    ref = GalleryRef("t", str(tmp_path / "index.yaml"))
    with pytest.raises(GalleryError, match="not valid YAML"):
        parse_model_index(b"- name: [", ref, MAX)
    with pytest.raises(GalleryError, match="CORRAL_MODEL_GALLERY_INDEX_MAX"):
        parse_model_index(b"x" * 100, ref, 10)
    with pytest.raises(GalleryError, match="must be a list"):
        parse_model_index(b"name: x", ref, MAX)
    with pytest.raises(GalleryError, match=r"entry 1 \('b'\) field 'files.0.uri'"):
        parse_model_index(
            yaml.safe_dump([{"name": "a"}, {"name": "b", "files": [{"filename": "f"}]}]).encode(), ref, MAX
        )
    with pytest.raises(GalleryError, match="sha256"):
        parse_model_index(
            yaml.safe_dump(
                [{"name": "a", "files": [{"filename": "f", "uri": "u", "sha256": "zz"}]}]
            ).encode(),
            ref,
            MAX,
        )


def test_an_alias_bomb_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    ref = GalleryRef("t", str(tmp_path / "index.yaml"))
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        bomb.append(
            f"{'abcdefghij'[level]}: &{'abcdefghij'[level]} ["
            + ", ".join([f"*{'abcdefghij'[level - 1]}"] * 10)
            + "]"
        )
    text = "- name: boom\n  config_file:\n" + "\n".join(f"    {line}" for line in bomb) + "\n"
    with pytest.raises(GalleryError, match=f"more than {EXPANDED_NODES_MAX} values"):
        parse_model_index(text.encode(), ref, MAX)


def test_config_file_as_a_yaml_string_is_read(tmp_path: Path) -> None:
    ref = GalleryRef("t", str(tmp_path / "index.yaml"))
    [model] = parse_model_index(
        yaml.safe_dump([{"name": "a", "config_file": "backend: simulator\n"}]).encode(), ref, MAX
    )
    assert model.entry.config_file == {"backend": "simulator"} and model.id == "t@a"


def test_file_locations_stay_inside_the_gallery_folders(tmp_path: Path) -> None:
    (tmp_path / "g" / "files").mkdir(parents=True)
    (tmp_path / "g" / "files" / "w.bin").write_bytes(b"w")
    (tmp_path / "g" / "out").symlink_to("/etc")
    local = GalleryRef("local", str(tmp_path / "g" / "index.yaml"))
    remote = GalleryRef("remote", "https://example.org/g/index.yaml")
    roots = gallery_roots([local, remote])
    assert roots == [(tmp_path / "g").resolve()]
    assert file_location(local, "files/w.bin", roots) == str((tmp_path / "g" / "files" / "w.bin").resolve())
    assert file_location(local, f"file://{tmp_path}/g/files/w.bin", roots).endswith("files/w.bin")
    assert file_location(remote, "w.bin", roots) == "https://example.org/g/w.bin"
    assert file_location(remote, "http://other/x", roots) == "http://other/x"
    for uri in (
        "../../etc/passwd",
        "/etc/passwd",
        "file:///etc/passwd",
        "out/passwd",
        "ftp://h/x",
        "s3://b/k",
        "",
    ):
        with pytest.raises(LocationRefused):
            file_location(local, uri, roots)
    assert file_location(local, "huggingface://TheBloke/phi-2-GGUF/phi-2.Q4_K_M.gguf", roots) == (
        "https://huggingface.co/TheBloke/phi-2-GGUF/resolve/main/phi-2.Q4_K_M.gguf"
    )
    assert (
        file_location(remote, "hf://o/r/sub/f.gguf@v2", roots)
        == "https://huggingface.co/o/r/resolve/v2/sub/f.gguf"
    )
    for uri in ("huggingface://o/r", "huggingface://o/r/../x"):
        with pytest.raises(LocationRefused):
            file_location(local, uri, roots)
    assert base_config_location(local, "github:mudler/LocalAI/gallery/virtual.yaml@master", roots) == (
        "https://raw.githubusercontent.com/mudler/LocalAI/master/gallery/virtual.yaml"
    )


def test_galleries_setting_refuses_other_schemes() -> None:
    assert [r.name for r in configured_galleries('[{"name": "a", "url": "/x/index.yaml"}]')] == ["a"]
    assert configured_galleries("[]") == []
    with pytest.raises(GalleryError, match="LOCALAI_GALLERIES"):
        configured_galleries('[{"name": "a", "url": "ftp://x/index.yaml"}]')
    with pytest.raises(GalleryError, match="LOCALAI_GALLERIES"):
        configured_galleries("[1]")


def test_plan_names_the_first_bad_field(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"w")
    ref = _index(tmp_path, [])
    [ok, twice, bad_uri] = parse_model_index(
        yaml.safe_dump(
            [
                {"name": "ok", "files": [{"filename": "a.bin", "uri": "w.bin"}]},
                {"name": "twice", "files": [{"filename": "a.bin", "uri": "w.bin"}] * 2},
                {
                    "name": "bad",
                    "files": [{"filename": "a.bin", "uri": "w.bin"}, {"filename": "b.bin", "uri": "/etc/x"}],
                },
            ]
        ).encode(),
        ref,
        MAX,
    )
    roots = gallery_roots([ref])
    assert [p.filename for p in plan_files(ok, roots)] == ["a.bin"]
    with pytest.raises(InstallError, match="listed twice") as twice_exc:
        plan_files(twice, roots)
    assert twice_exc.value.field == "files[1].filename"
    with pytest.raises(InstallError) as uri_exc:
        plan_files(bad_uri, roots)
    assert uri_exc.value.field == "files[1].uri"
    config = model_config(ok, "mine", {"context_size": 8}, {"backend": "simulator"})
    assert config == {
        "backend": "simulator",
        "name": "mine",
        "context_size": 8,
        "parameters": {"model": "a.bin"},
    }


def test_download_verifies_renames_and_never_follows_a_symlink(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    source = tmp_path / "w.bin"
    source.write_bytes(b"weights")
    good = hashlib.sha256(b"weights").hexdigest()
    seen: list[tuple[str, int, int]] = []
    download_file(
        PlannedFile(0, "w.bin", str(source), good, 0), models, "job", 5.0, MAX, lambda *a: seen.append(a)
    )
    assert (models / "w.bin").read_bytes() == b"weights" and seen[-1] == ("w.bin", 7, 7)
    with pytest.raises(InstallError, match="sha256 mismatch") as bad:
        download_file(
            PlannedFile(0, "x.bin", str(source), "0" * 64, 0), models, "job", 5.0, MAX, lambda *a: None
        )
    assert bad.value.field == "files[0].sha256"
    with pytest.raises(InstallError, match="CORRAL_MODEL_GALLERY_MAX_DOWNLOAD"):
        download_file(PlannedFile(0, "y.bin", str(source), "", 0), models, "job", 5.0, 3, lambda *a: None)
    (models / "link.bin").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InstallError, match="symlink"):
        download_file(
            PlannedFile(0, "link.bin", str(source), "", 0), models, "job", 5.0, MAX, lambda *a: None
        )
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in models.iterdir()) == ["link.bin", "w.bin"]  # no partial file left
