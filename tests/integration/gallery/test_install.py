"""Installing backends from a local gallery into an empty backends path: atomic, verified, serialised, durable."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.gallery.index import BackendNotFound, GalleryRef, parse_index
from corral.gallery.installer import BackendInstaller, InstallError
from corral.gallery.registry import BackendRegistry
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import Supervisor, _probe_health
from support.cluster import free_port
from support.galleries import PYTHON_SECTION, make_manager, tar_gz, write_index

slow = pytest.mark.slow  # an install with a python section builds a venv (a few seconds)


def _names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


class CountingInstaller(BackendInstaller):
    calls = 0

    def install(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        CountingInstaller.calls += 1
        return super().install(*args, **kwargs)


@slow
async def test_install_into_an_empty_path_is_complete_and_survives_a_restart(
    tmp_path: Path, gallery_index: Path
) -> None:
    backends = tmp_path / "backends"
    galleries = [GalleryRef("test", str(gallery_index))]
    manager = make_manager(backends, galleries)
    manager.installer = CountingInstaller(backends, require_integrity=False, timeout_s=30)
    CountingInstaller.calls = 0
    seen: list[tuple[str, str]] = []
    first, second = await asyncio.gather(
        manager.ensure("refbackend", progress=lambda p, f, c, t, b: seen.append((p, f))),
        manager.ensure("ref", progress=lambda p, f, c, t, b: seen.append((p, f))),  # the alias, concurrently
    )
    assert CountingInstaller.calls == 1  # concurrent installs of one backend: one install, both get it
    assert first.directory == second.directory == backends / "refbackend"
    assert _names(backends) == ["refbackend"]  # no staging directory left
    installed = first.directory
    assert (installed / "metadata.json").is_file() and (installed / "venv" / "bin" / "python").exists()
    assert {"resolving", "extracting", "downloading"} <= {phase for phase, _ in seen}
    site = subprocess.run(
        [str(installed / "venv" / "bin" / "python"), "-c", "import refdep; print(refdep.__file__)"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert str(installed / "venv") in site.stdout  # refdep is in the backend's own venv
    activate = (installed / "venv" / "bin" / "activate").read_text()
    assert f'VIRTUAL_ENV="{installed}/venv"' in activate  # relocated before publishing
    assert ".install-" not in activate

    restarted = make_manager(backends, galleries)  # a restarted worker: same path, new objects
    restarted.installer = CountingInstaller(backends, require_integrity=False, timeout_s=30)
    again = await restarted.ensure("refbackend")
    assert CountingInstaller.calls == 1 and again.directory == installed  # no work redone


@slow
async def test_an_archive_with_its_digest_installs_and_a_mismatch_leaves_nothing(
    tmp_path: Path, gallery_index: Path
) -> None:
    backends = tmp_path / "backends"
    manager = make_manager(backends, [GalleryRef("test", str(gallery_index))], require_integrity=True)
    installed = await manager.ensure("refarchive")
    assert installed.metadata.digest and installed.metadata.uri and installed.metadata.uri.endswith(".tar.gz")

    bad = write_index(
        tmp_path / "bad.yaml",
        [
            {
                "name": "tampered",
                "uri": str(gallery_index.parent / "refarchive.tar.gz"),
                "sha256": "0" * 64,
                "python": PYTHON_SECTION,
            }
        ],
    )
    manager = make_manager(backends, [GalleryRef("bad", str(bad))], require_integrity=True)
    with pytest.raises(InstallError, match="digest mismatch"):
        await manager.ensure("tampered")
    assert _names(backends) == ["refarchive"]


async def test_integrity_required_refuses_an_entry_without_a_digest(
    tmp_path: Path, gallery_index: Path
) -> None:
    manager = make_manager(tmp_path / "b", [GalleryRef("test", str(gallery_index))], require_integrity=True)
    with pytest.raises(InstallError, match="LOCALAI_REQUIRE_BACKEND_INTEGRITY"):
        await manager.ensure("refbackend")
    assert _names(tmp_path / "b") == []


async def test_an_unknown_backend_names_the_galleries_searched(tmp_path: Path, gallery_index: Path) -> None:
    manager = make_manager(tmp_path / "b", [GalleryRef("test", str(gallery_index))])
    with pytest.raises(BackendNotFound, match=r"galleries searched: test \("):
        await manager.ensure("nope")


@slow
async def test_an_unpack_that_fails_half_way_leaves_nothing_and_other_backends_keep_working(
    tmp_path: Path, gallery_index: Path
) -> None:
    backends = tmp_path / "backends"
    source = gallery_index.parent / "refbackend"
    big = tmp_path / "big"
    (big / "data").mkdir(parents=True)
    (big / "run.sh").write_text("#!/bin/sh\n")
    for i in range(30):
        (big / "data" / f"f{i}").write_bytes(os.urandom(50_000))
    good = tmp_path / "big.tar.gz"
    tar_gz(big, good)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # fails half-way through extraction
    index = write_index(
        tmp_path / "i.yaml",
        [
            {"name": "cut", "uri": str(cut)},
            {"name": "refbackend", "uri": str(source), "python": PYTHON_SECTION},
        ],
    )
    manager = make_manager(backends, [GalleryRef("i", str(index))])
    await manager.ensure("refbackend")
    with pytest.raises(InstallError, match="archive"):
        await manager.ensure("cut")
    assert _names(backends) == ["refbackend"]
    assert manager.registry.find("cut") is None and manager.registry.find("refbackend") is not None


def test_a_full_disk_fails_with_a_clear_error_and_leaves_nothing(tmp_path: Path, gallery_index: Path) -> None:
    """A real write failure: the install runs in a process whose file size limit (RLIMIT_FSIZE) is 256 KiB."""
    big = tmp_path / "big"
    big.mkdir()
    (big / "run.sh").write_text("#!/bin/sh\n")
    (big / "weights.bin").write_bytes(os.urandom(1 << 20))
    index = write_index(tmp_path / "i.yaml", [{"name": "big", "uri": str(big)}])
    backends = tmp_path / "backends"
    script = (
        "import resource, signal, sys\n"
        "from corral.gallery.index import GalleryRef, find_entry\n"
        "from corral.gallery.installer import BackendInstaller, InstallError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))\n"
        f"ref = GalleryRef('i', {str(index)!r})\n"
        "entry, _ = find_entry('big', [ref], 5)\n"
        f"inst = BackendInstaller(__import__('pathlib').Path({str(backends)!r}), require_integrity=False, timeout_s=5)\n"
        "try:\n    inst.install(entry, ref)\nexcept InstallError as exc:\n    print(exc); sys.exit(3)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "disk full" in result.stdout and "free space" in result.stdout
    assert _names(backends) == []


def test_leftovers_of_a_crashed_install_are_invisible_and_cleaned(tmp_path: Path) -> None:
    backends = tmp_path / "backends"
    half = backends / ".install-x-123"
    half.mkdir(parents=True)
    (half / "run.sh").write_text("#!/bin/sh\n")
    (backends / "y").mkdir()
    (backends / "y" / "run.sh").write_text("#!/bin/sh\n")  # no metadata.json: an install cut short
    registry = BackendRegistry(backends, None, None)
    assert registry.installed() == [] and registry.find("y") is None
    assert BackendInstaller(backends, require_integrity=False, timeout_s=5).clean_leftovers() == [
        ".install-x-123"
    ]
    assert _names(backends) == ["y"]


@slow
async def test_an_installed_reference_layout_backend_runs_unmodified(
    tmp_path: Path, gallery_index: Path
) -> None:
    """backend.py generated from backend.proto + the reference's run.sh (source venv/bin/activate; python ...)."""
    import grpc

    from corral.proto import backend_pb2, backend_pb2_grpc

    backends = tmp_path / "backends"
    manager = make_manager(backends, [GalleryRef("test", str(gallery_index))])
    installed = await manager.ensure("refbackend")
    base = free_port()
    supervisor = Supervisor(
        PortAllocator(base, base + 10),
        bind_host="127.0.0.1",
        token="tok",
        start_timeout_s=30,
        registry=manager.registry,
    )
    try:
        proc = await supervisor.ensure("m#0", installed)
        assert await _probe_health(proc.local_address, "tok", 2.0)
        assert not await _probe_health(proc.local_address, "wrong", 2.0)  # its own bearer check, from our env
        async with grpc.aio.insecure_channel(proc.local_address) as channel:
            stub = backend_pb2_grpc.BackendStub(channel)
            reply = await stub.Predict(
                backend_pb2.PredictOptions(Prompt="hi"),
                timeout=5,
                metadata=(("authorization", "Bearer tok"),),
            )
        assert reply.message == b"refbackend says: hi"
        assert await supervisor.ensure("m#0", "ref") is proc  # reused by alias: same directory, same inode
    finally:
        await supervisor.stop_all(force=True)


@slow
def test_python_common_is_copied_in_as_common_and_a_missing_one_leaves_nothing(
    tmp_path: Path, gallery_index: Path
) -> None:
    shared = tmp_path / "gallery" / "shared"
    shared.mkdir(parents=True)
    (shared / "corral_backend.py").write_text("SHARED = True\n")
    source = gallery_index.parent / "refbackend"
    index = write_index(
        tmp_path / "gallery" / "index.yaml",
        [
            {"name": "withcommon", "uri": str(source), "python": {**PYTHON_SECTION, "common": "shared"}},
            {"name": "nocommon", "uri": str(source), "python": {**PYTHON_SECTION, "common": "absent"}},
        ],
    )
    ref = GalleryRef("test", str(index))
    backends = tmp_path / "backends"
    installer = BackendInstaller(backends, require_integrity=False, timeout_s=30)
    installed = installer.install(parse_index(index.read_bytes(), str(index))[0], ref)
    assert (installed / "common" / "corral_backend.py").read_text() == "SHARED = True\n"
    with pytest.raises(InstallError, match=r"python.common .*absent is not a directory"):
        installer.install(parse_index(index.read_bytes(), str(index))[1], ref)
    assert _names(backends) == ["withcommon"]
