"""Archive extraction refuses members that escape the target; directory digests are stable."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from corral.gallery.archive import ArchiveError, extract, tree_digest


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def _zip(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "members, links",
    [
        ({"../evil.sh": b"x"}, None),
        ({"/abs/evil.sh": b"x"}, None),
        ({"run.sh": b"x"}, {"escape": "/etc/passwd"}),
        ({"run.sh": b"x"}, {"up": "../../outside"}),
    ],
)
def test_tar_members_escaping_the_target_are_refused(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str] | None
) -> None:
    target = tmp_path / "t"
    target.mkdir()
    with pytest.raises(ArchiveError):
        extract(_tar(tmp_path / "a.tar.gz", members, links), target, "a.tar.gz")
    assert not (tmp_path / "evil.sh").exists()


def test_zip_slip_and_zip_symlinks_are_refused(tmp_path: Path) -> None:
    from support.galleries import zip_bytes

    target = tmp_path / "t"
    target.mkdir()
    with pytest.raises(ArchiveError, match="outside"):
        extract(_zip(tmp_path / "a.zip", zip_bytes({"ok.txt": b"1", "../../evil.sh": b"x"})), target, "a.zip")
    assert not (tmp_path / "evil.sh").exists()
    with pytest.raises(ArchiveError, match="symbolic link"):
        extract(_zip(tmp_path / "b.zip", zip_bytes({}, {"link": "/etc/passwd"})), target, "b.zip")


def test_a_truncated_archive_is_an_archive_error(tmp_path: Path) -> None:
    good = _tar(tmp_path / "a.tar.gz", {f"f{i}": bytes(2000) for i in range(20)})
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[:200])
    target = tmp_path / "t"
    target.mkdir()
    with pytest.raises(ArchiveError):
        extract(cut, target, "cut.tar.gz")


def test_tree_digest_depends_on_paths_and_contents_only(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "run.sh").write_text("echo")
        (tmp_path / name / "sub" / "x").write_text("1")
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    (tmp_path / "b" / "sub" / "x").write_text("2")
    assert tree_digest(tmp_path / "a") != tree_digest(tmp_path / "b")
