"""Gallery indexes: which galleries a worker searches and the entries they list.

`LOCALAI_BACKEND_GALLERIES` (and a request's `backend_galleries`) is a JSON list
`[{"name": "corral", "url": "<path or http(s) URL of an index>"}]`; a bare path or URL is
accepted as one gallery. The entry format is documented in `corral.gallery`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from corral.gallery.fetch import FetchError, read_bytes
from corral.models.names import backend_name_problem

INDEX_MAX_BYTES = 4 << 20  # an index is a list of short entries; anything larger is refused unread
INDEX_MAX_ENTRIES = 10_000
GALLERIES_MAX_CHARS = 16_384
DEFAULT_INDEX = Path(str(resources.files("corral.gallery").joinpath("index.yaml")))  # package data
SHA256_HEX_CHARS = 64


class GalleryError(Exception):
    """A gallery cannot be read or parsed, or an entry is invalid; the message names the gallery."""


NOT_FOUND_MARK = "is not installed and no gallery lists it"  # in a worker's reply error: the frontend's 404


class BackendNotFound(GalleryError):
    """No gallery lists the backend; the message names every gallery searched (the frontend maps it to 404)."""

    def __init__(self, backend: str, galleries: list[GalleryRef]) -> None:
        searched = ", ".join(f"{g.name} ({g.url})" for g in galleries) or "none configured"
        super().__init__(
            f"backend {backend!r} {NOT_FOUND_MARK}; galleries searched: "
            f"{searched} (set LOCALAI_BACKEND_GALLERIES or the request's backend_galleries)"
        )
        self.backend = backend
        self.galleries = galleries


@dataclass(frozen=True)
class GalleryRef:
    name: str
    url: str  # path or http(s) URL of the index


class PythonSection(BaseModel):
    """A Python package set installed with pip into `<installed dir>/venv`."""

    model_config = ConfigDict(extra="forbid")

    requirements: str = "requirements.txt"  # relative to the backend directory
    find_links: list[str] = Field(default_factory=list)  # wheel dirs (relative to the backend dir) or URLs
    no_index: bool = False  # install only from find_links (offline)
    inherit_worker_packages: bool = False  # the worker's packages (grpcio, protobuf) as a read-only fallback
    # code every Python backend of the gallery shares (the reference's backend/python/common/): a directory,
    # relative to the index or absolute, copied into the installed backend as `common/`
    common: str | None = None

    @field_validator("common")
    @classmethod
    def _directory(cls, value: str | None) -> str | None:
        if value is not None and (not value or "\x00" in value or is_url(value)):
            raise ValueError("python.common must be a directory (relative to the index, or absolute)")
        return value

    @field_validator("requirements")
    @classmethod
    def _relative(cls, value: str) -> str:
        _check_relative(value, "python.requirements")
        return value


class GalleryEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    alias: str | None = None
    description: str = ""
    version: str | None = None
    uri: str
    sha256: str | None = None
    python: PythonSection | None = None

    @field_validator("name", "alias")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and (problem := backend_name_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.lower().removeprefix("sha256:")
        if len(value) != SHA256_HEX_CHARS or any(c not in "0123456789abcdef" for c in value):
            raise ValueError("must be 64 hexadecimal characters (a SHA-256 digest)")
        return value

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        if not value or "\x00" in value:
            raise ValueError("must be a directory or .tar.gz/.zip archive (path or http(s) URL)")
        return value


def _check_relative(value: str, field: str) -> None:
    if not value or value.startswith("/") or ".." in Path(value).parts or "\x00" in value:
        raise ValueError(f"{field} must be a relative path inside the backend directory, got {value!r}")


def is_url(location: str) -> bool:
    return urlparse(location).scheme in ("http", "https")


def resolve_location(index_url: str, uri: str) -> str:
    """An entry's `uri` as an absolute path or URL: relative ones resolve against the index's location."""
    if is_url(uri) or uri.startswith("/"):
        return uri
    if uri.startswith("file://"):
        return urlparse(uri).path
    if is_url(index_url):
        return urljoin(index_url, uri)
    base = Path(urlparse(index_url).path if index_url.startswith("file://") else index_url)
    return str((base.parent / uri).resolve())


def parse_galleries(raw: str, field: str = "LOCALAI_BACKEND_GALLERIES") -> list[GalleryRef]:
    """`[{"name","url"}]` JSON, or a bare path/URL; an empty value means no gallery."""
    raw = raw.strip()
    if not raw:
        return []
    if len(raw) > GALLERIES_MAX_CHARS:
        raise GalleryError(f"{field} is {len(raw)} characters; at most {GALLERIES_MAX_CHARS} are accepted")
    if not raw.startswith("["):
        return [GalleryRef(name=raw, url=raw)]
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise GalleryError(f'{field} must be a JSON list [{{"name": ..., "url": ...}}]: {exc}') from None
    refs = []
    for i, item in enumerate(items if isinstance(items, list) else [None]):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item["url"]:
            raise GalleryError(f'{field}[{i}] must be an object with a non-empty "url" string')
        if "\x00" in item["url"]:
            raise GalleryError(f"{field}[{i}].url must not contain NUL")
        refs.append(GalleryRef(name=str(item.get("name") or item["url"]), url=item["url"]))
    return refs


def parse_index(data: bytes, source: str) -> list[GalleryEntry]:
    """The entries of an index (YAML or JSON: a list, or a mapping with a `backends` list)."""
    if len(data) > INDEX_MAX_BYTES:
        raise GalleryError(f"gallery index {source} is {len(data)} bytes; at most {INDEX_MAX_BYTES} are read")
    try:
        doc: Any = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise GalleryError(f"gallery index {source} is not valid YAML/JSON: {exc}") from None
    if isinstance(doc, dict):
        doc = doc.get("backends")
    if not isinstance(doc, list):
        raise GalleryError(
            f"gallery index {source} must be a list of backend entries (or {{backends: [...]}})"
        )
    if len(doc) > INDEX_MAX_ENTRIES:
        raise GalleryError(f"gallery index {source} lists {len(doc)} entries; at most {INDEX_MAX_ENTRIES}")
    entries = []
    for i, item in enumerate(doc):
        try:
            entries.append(GalleryEntry.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            raise GalleryError(f"gallery index {source}: entry {i} field {where!r}: {first['msg']}") from None
    return entries


def load_index(ref: GalleryRef, timeout_s: float) -> list[GalleryEntry]:
    """Read and parse one gallery's index (blocking: call from a thread)."""
    try:
        data = read_bytes(ref.url, INDEX_MAX_BYTES, timeout_s)
    except FetchError as exc:
        raise GalleryError(f"gallery {ref.name!r} cannot be read: {exc}") from None
    return parse_index(data, f"{ref.name!r} ({ref.url})")


def find_entry(name: str, galleries: list[GalleryRef], timeout_s: float) -> tuple[GalleryEntry, GalleryRef]:
    """The first entry called `name` (or aliased so) across `galleries`, in order; BackendNotFound otherwise.

    A gallery that cannot be read is skipped when a later one lists the backend; when none does,
    the error names the unreadable galleries with their cause.
    """
    problems = []
    for ref in galleries:
        try:
            entries = load_index(ref, timeout_s)
        except GalleryError as exc:
            problems.append(str(exc))
            continue
        for entry in entries:
            if name in (entry.name, entry.alias):
                return entry, ref
    if problems:
        searched = ", ".join(f"{g.name} ({g.url})" for g in galleries)
        raise GalleryError(
            f"backend {name!r} is not installed and no readable gallery lists it; galleries "
            f"searched: {searched}; " + "; ".join(problems)
        )
    raise BackendNotFound(name, galleries)
