"""staging/http_body: chunked and length-delimited request bodies, a cut body named as such."""

from __future__ import annotations

import io

import pytest

from corral.staging.http_body import BodyCut, ChunkedBody


def test_chunked_body_is_decoded_and_trailers_skipped() -> None:
    raw = b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nTrailer: x\r\n\r\n"
    body = ChunkedBody(io.BufferedReader(io.BytesIO(raw)), None)
    buffer = memoryview(bytearray(100))
    out = b""
    while count := body.readinto(buffer):
        out += bytes(buffer[:count])
    assert out == b"abcdefg" and body.finished


def test_chunked_body_cut_between_chunks_is_a_body_cut() -> None:
    body = ChunkedBody(io.BufferedReader(io.BytesIO(b"4\r\nabcd\r\n")), None)
    buffer = memoryview(bytearray(100))
    assert body.readinto(buffer) == 4
    with pytest.raises(BodyCut):
        body.readinto(buffer)
