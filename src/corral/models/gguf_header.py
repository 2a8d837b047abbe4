"""GGUF header facts read from the header only: magic, version, counts and the key-value section.

`gguf.GGUFReader` memory-maps the file and builds numpy views of every field and tensor: for a
262k-token vocabulary that is ~10 s of CPU to learn four integers. This reader walks the
key-value section once and stops there; array values are skipped (numeric arrays by one seek,
string arrays by hopping over their length prefixes) and never materialised, and it can stop as
soon as the keys a caller wants are found (llama.cpp writes `general.*` and `<arch>.*` before the
tokenizer). Pure file reading, no numpy: call it off the event loop (`asyncio.to_thread`).
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

GGUF_MAGIC = b"GGUF"
CHUNK_BYTES = 1 << 16
MAX_KEY_BYTES = 1 << 16  # llama.cpp refuses longer keys too; a bigger length means a corrupt file
MAX_KV_COUNT = 1 << 20

# GGUFValueType: code → struct format of one scalar
_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")

Value = int | float | bool | str


class GGUFHeaderError(ValueError):
    """The file is not a GGUF this reader understands (bad magic, unknown version or value type, or
    truncated inside the header); llama.cpp would refuse it too: re-download or re-convert the model."""


@dataclass(frozen=True)
class ArrayValue:
    """An array field, described but not read: the item type code (GGUFValueType) and its length."""

    item_type: int
    count: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    tensor_count: int
    kv_count: int
    fields: dict[str, Value | ArrayValue] = field(default_factory=dict)
    kv_end_offset: int = 0  # file offset right after the last key-value pair read

    def get(self, key: str) -> Value | ArrayValue | None:
        return self.fields.get(key)

    def int_field(self, key: str) -> int | None:
        value = self.fields.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def str_field(self, key: str) -> str | None:
        value = self.fields.get(key)
        return value if isinstance(value, str) else None


class _Cursor:
    """Sequential reads over a file through one buffer; skips seek without reading."""

    def __init__(self, handle: BinaryIO, path: str) -> None:
        self._handle, self._path = handle, path
        self._buf = b""
        self._pos = 0  # position in _buf
        self._base = 0  # file offset of _buf[0]

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def _fill(self, n: int) -> None:
        if len(self._buf) - self._pos >= n:
            return
        rest = self._buf[self._pos :]
        self._base += self._pos
        self._buf = rest + self._handle.read(max(n - len(rest), CHUNK_BYTES))
        self._pos = 0
        if len(self._buf) < n:
            raise GGUFHeaderError(
                f"{self._path}: truncated GGUF header at byte {self.offset} "
                f"(needed {n} more bytes, file ends first)"
            )

    def take(self, n: int) -> bytes:
        self._fill(n)
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def unpack(self, fmt: struct.Struct) -> int:
        self._fill(fmt.size)
        (value,) = fmt.unpack_from(self._buf, self._pos)
        self._pos += fmt.size
        return int(value)

    def skip(self, n: int) -> None:
        if self._pos + n <= len(self._buf):
            self._pos += n
            return
        target = self.offset + n
        self._handle.seek(target)
        self._buf, self._pos, self._base = b"", 0, target

    def skip_strings(self, count: int, length: struct.Struct) -> None:
        """Hop over `count` length-prefixed strings, refilling the buffer as needed."""
        unpack_from, size = length.unpack_from, length.size
        while count:
            buf, pos, end = self._buf, self._pos, len(self._buf)
            while count and pos + size <= end:
                (n,) = unpack_from(buf, pos)
                if pos + size + n > end:
                    break
                pos += size + n
                count -= 1
            self._pos = pos
            if count:
                self._fill(size)
                (n,) = unpack_from(self._buf, self._pos)
                self._pos += size
                self.skip(n)
                count -= 1


def read_gguf_header(path: str | Path, want: Collection[str] | None = None) -> GGUFHeader:
    """Parse the header and key-value section of a GGUF file; never the tensor infos or data.

    With `want`, reading stops once every wanted key has been seen (the header then holds the
    fields read so far). Raises GGUFHeaderError for a file that is not a readable GGUF.
    """
    with open(path, "rb", buffering=0) as handle:
        return _parse(_Cursor(handle, str(path)), set(want) if want is not None else None)


def _parse(cur: _Cursor, want: set[str] | None) -> GGUFHeader:
    magic = cur.take(4)
    if magic != GGUF_MAGIC:
        raise GGUFHeaderError(f"{cur._path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    version = cur.unpack(_U32)
    if version not in (1, 2, 3):
        raise GGUFHeaderError(f"{cur._path}: GGUF version {version} is not supported (1, 2 or 3)")
    count = _U32 if version == 1 else _U64  # v1 used 32-bit counts and lengths
    tensor_count, kv_count = cur.unpack(count), cur.unpack(count)
    if kv_count > MAX_KV_COUNT:
        raise GGUFHeaderError(
            f"{cur._path}: {kv_count} key-value pairs is more than {MAX_KV_COUNT} (corrupt header)"
        )
    fields: dict[str, Value | ArrayValue] = {}
    for _ in range(kv_count):
        key_len = cur.unpack(count)
        if key_len > MAX_KEY_BYTES:
            raise GGUFHeaderError(
                f"{cur._path}: key length {key_len} at byte {cur.offset} is over "
                f"{MAX_KEY_BYTES} (corrupt header)"
            )
        key = cur.take(key_len).decode("utf-8", errors="replace")
        fields[key] = _read_value(cur, cur.unpack(_U32), count)
        if want is not None and want.issubset(fields):
            break
    return GGUFHeader(version, tensor_count, kv_count, fields, cur.offset)


def _read_value(cur: _Cursor, value_type: int, count: struct.Struct) -> Value | ArrayValue:
    scalar = _SCALARS.get(value_type)
    if scalar is not None:
        fmt = struct.Struct(scalar)
        (value,) = fmt.unpack(cur.take(fmt.size))
        return value  # type: ignore[no-any-return]
    if value_type == STRING:
        return cur.take(cur.unpack(count)).decode("utf-8", errors="replace")
    if value_type == ARRAY:
        item_type, n = cur.unpack(_U32), cur.unpack(count)
        item = _SCALARS.get(item_type)
        if item is not None:
            cur.skip(struct.calcsize(item) * n)
        elif item_type == STRING:
            cur.skip_strings(n, count)
        else:  # arrays of arrays: no GGUF writer produces them; llama.cpp rejects them too
            raise GGUFHeaderError(
                f"{cur._path}: array of value type {item_type} at byte {cur.offset} is not supported"
            )
        return ArrayValue(item_type, n)
    raise GGUFHeaderError(f"{cur._path}: unknown GGUF value type {value_type} at byte {cur.offset}")


@lru_cache(maxsize=256)
def _cached(path: str, _size: int, _mtime_ns: int, want: frozenset[str] | None) -> GGUFHeader:
    return read_gguf_header(path, want)


def cached_gguf_header(path: str | Path, want: Collection[str] | None = None) -> GGUFHeader:
    """`read_gguf_header`, remembered per (path, size, mtime): a replaced file is read again."""
    stat = Path(path).stat()
    return _cached(str(path), stat.st_size, stat.st_mtime_ns, frozenset(want) if want is not None else None)
