"""Small PNG images written in code (zlib + struct, no imaging library), for the vision tests."""

from __future__ import annotations

import base64
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png(width: int, height: int, pixel: tuple[int, int, int] | None = None, *, seed: int = 0) -> bytes:
    """An RGB PNG: one colour (`pixel`), or a deterministic pattern of `seed`."""
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")  # filter type 0 per row
        for x in range(width):
            row += (
                bytes(pixel)
                if pixel
                else bytes(
                    ((x * 37 + y * 11 + seed * 97) % 256, (x * y + seed * 13) % 256, (x ^ y ^ seed) % 256)
                )
            )
        rows.append(bytes(row))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + _chunk(b"IEND", b"")
    )


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
