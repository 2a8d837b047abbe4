"""staging/partial_digests: a partial file's digest kept only while the file is exactly as hashed, bounded."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from corral.staging.partial_digests import PartialDigests


def test_partial_digest_is_kept_only_for_the_file_exactly_as_it_was_hashed(tmp_path: Path) -> None:
    path = tmp_path / "part.bin"
    path.write_bytes(b"abc")
    digests = PartialDigests()
    digests.keep(path, hashlib.sha256(b"ab"), 2)  # the file holds a byte the digest did not see
    assert digests.current(path) is None
    digests.keep(path, hashlib.sha256(b"abc"), 3)
    kept = digests.current(path)
    assert kept is not None and kept.hexdigest() == hashlib.sha256(b"abc").hexdigest()
    stat = path.stat()
    with open(path, "r+b") as file:  # same size and inode, new content and mtime: not that file any more
        file.write(b"x")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert digests.current(path) is None
    digests.keep(path, hashlib.sha256(b"xbc"), 3)
    path.unlink()
    assert digests.current(path) is None


def test_partial_digests_forget_the_oldest_past_their_bound(tmp_path: Path) -> None:
    digests = PartialDigests(max_entries=2)
    paths = [tmp_path / f"{i}.bin" for i in range(3)]
    for path in paths:
        path.write_bytes(b"z")
        digests.keep(path, hashlib.sha256(b"z"), 1)
    assert [digests.current(p) is not None for p in paths] == [False, True, True]
