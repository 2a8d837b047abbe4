"""Galleries over HTTP: an index and an archive served on loopback; a gallery that hangs; a huge index."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.gallery.fetch import FetchError, read_bytes
from corral.gallery.index import INDEX_MAX_BYTES, GalleryError, GalleryRef, find_entry
from corral.gallery.installer import BackendInstaller
from support.galleries import tar_gz, write_index


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A static HTTP server over tmp_path/www: (base URL, directory)."""
    www = tmp_path / "www"
    www.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(www), **kwargs)

        def log_message(self, *args: object) -> None:
            return None

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            return None  # a client that refuses a huge file hangs up mid-body: expected here

    server = Server(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", www
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_an_archive_listed_by_an_http_index_installs_relative_to_the_index(
    tmp_path: Path, served: tuple[str, Path]
) -> None:
    base, www = served
    src = tmp_path / "tiny"
    src.mkdir()
    (src / "run.sh").write_text("#!/bin/sh\nexec sleep 60\n")
    (www / "backends").mkdir()
    digest = tar_gz(src, www / "backends" / "tiny.tar.gz", top="tiny")  # one top-level directory
    write_index(www / "index.yaml", [{"name": "tiny", "uri": "backends/tiny.tar.gz", "sha256": digest}])
    ref = GalleryRef("web", f"{base}/index.yaml")
    entry, _ = find_entry("tiny", [ref], timeout_s=5)
    seen: list[str] = []
    target = BackendInstaller(tmp_path / "backends", require_integrity=True, timeout_s=5).install(
        entry, ref, lambda phase, *_: seen.append(phase)
    )
    assert (target / "run.sh").stat().st_mode & 0o111 and (target / "metadata.json").is_file()
    assert "downloading" in seen and "extracting" in seen


def test_a_gallery_that_hangs_fails_in_time_naming_the_knob() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts connections, never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/index.yaml"
        with pytest.raises(GalleryError) as info:
            find_entry("x", [GalleryRef("stuck", url)], timeout_s=0.5)
        assert "LOCALAI_BACKEND_GALLERY_TIMEOUT" in str(info.value) and "stuck" in str(info.value)
    finally:
        listener.close()


def test_a_huge_index_is_refused_before_it_is_read_whole(served: tuple[str, Path]) -> None:
    base, www = served
    (www / "huge.yaml").write_bytes(b"#" * (INDEX_MAX_BYTES + 10))
    with pytest.raises(FetchError, match="larger than"):
        read_bytes(f"{base}/huge.yaml", INDEX_MAX_BYTES, 5)
    with pytest.raises(GalleryError, match="larger than"):
        find_entry("x", [GalleryRef("huge", f"{base}/huge.yaml")], timeout_s=5)


def test_a_url_uri_must_be_an_archive(tmp_path: Path, served: tuple[str, Path]) -> None:
    from corral.gallery.installer import InstallError

    base, www = served
    write_index(www / "index.yaml", [{"name": "d", "uri": f"{base}/somewhere/"}])
    ref = GalleryRef("web", f"{base}/index.yaml")
    entry, _ = find_entry("d", [ref], timeout_s=5)
    with pytest.raises(InstallError, match="archive"):
        BackendInstaller(tmp_path / "b", require_integrity=False, timeout_s=5).install(entry, ref)
    assert [p.name for p in (tmp_path / "b").iterdir()] == []
