"""Model gallery indexes (the reference's `LOCALAI_GALLERIES`): the models a gallery offers and the files
each one downloads, validated before anything is fetched or written.

An index is YAML or JSON: a list of entries (or a mapping with a `models:` list). An entry, as the
reference's gallery models:

    - name: phi-2                         # required; the installed model's name unless apply names another
      description: ...                    # description, license, icon, url: strings; urls, tags: lists
      config_file: {backend: llama-cpp, parameters: {model: phi-2.Q4_K_M.gguf}}   # the model config
      overrides: {context_size: 4096}     # merged over config_file (and the request's overrides over it)
      files:                              # downloaded into the models directory
        - filename: phi-2.Q4_K_M.gguf     # a plain file name: no '/', '\\', '..', NUL, leading '.', no
                                          # .yaml/.yml (model configs live there), at most 255 bytes
          uri: https://host/phi-2.Q4_K_M.gguf   # http(s), huggingface://<owner>/<repo>/<path>[@<branch>],
                                          # or file:// / a path / a name relative to a local index:
                                          # only inside a configured local gallery's folder
          sha256: 3f2a...                 # optional; a mismatch fails the install and deletes the file
          size: 1.6GiB                    # optional (corral): sizes the model before it is downloaded
      variants: [{model: phi-2-q8}]       # other entries (by name or gallery@name) building the same model

An index whose YAML is invalid, too large (CORRAL_MODEL_GALLERY_INDEX_MAX), expands past
`EXPANDED_NODES_MAX` values through YAML aliases, or has a field of the wrong type is refused whole,
with a message naming the gallery, the entry and the field.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from corral.config.model_gallery import GALLERIES_KNOB, INDEX_MAX_KNOB, TIMEOUT_KNOB
from corral.config.sizes import parse_size_bytes
from corral.gallery import fetch
from corral.gallery.index import GalleryError, GalleryRef, is_url, parse_galleries

INDEX_MAX_ENTRIES = 50_000
EXPANDED_NODES_MAX = 2_000_000  # values an index may hold once YAML aliases are expanded
CONFIG_VALUES_MAX = 10_000  # values one entry's config_file or overrides may hold (a model config has ~50)
FILE_NAME_MAX_BYTES = 255
CONFIG_SUFFIXES = (".yaml", ".yml")
SHA256_HEX_CHARS = 64
HUGGINGFACE = "https://huggingface.co"


def file_name_problem(name: object) -> str | None:
    """Why `name` is not a plain file name inside the models directory, or None when it is."""
    if not isinstance(name, str) or not name:
        return "is required (a file name in the models directory)"
    shown = name if len(name) <= 64 else f"{name[:64]}…"
    if "\x00" in name:
        return "must not contain NUL"
    if len(name.encode("utf-8", "surrogatepass")) > FILE_NAME_MAX_BYTES:
        return f"must be at most {FILE_NAME_MAX_BYTES} bytes ({shown!r})"
    if "/" in name or "\\" in name:
        return f"{shown!r} must be a plain file name: no '/' or '\\' (absolute paths and folders are refused)"
    if name in (".", "..") or ".." in name:
        return f"{shown!r} must not contain '..'"
    if name.startswith("."):
        return f"{shown!r} must not start with '.'"
    if name.lower().endswith(CONFIG_SUFFIXES):
        return f"{shown!r} must not end with .yaml/.yml: model configs live in the models directory"
    if any(ord(c) < 32 for c in name):
        return f"{shown!r} must not contain control characters"
    return None


class ModelFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    filename: str
    uri: str
    sha256: str = ""
    size: int | str | None = None

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        value = value.strip().lower()
        if value and (len(value) != SHA256_HEX_CHARS or any(c not in "0123456789abcdef" for c in value)):
            raise ValueError("must be 64 hexadecimal digits (a SHA-256 digest)")
        return value

    def size_bytes(self) -> int:
        """The declared size (bytes, or a size like 1.6GiB); 0 when unknown or unreadable."""
        if isinstance(self.size, int):
            return max(0, self.size)
        try:
            return parse_size_bytes(self.size) if self.size else 0
        except ValueError:
            return 0


class Variant(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str


class ModelEntry(BaseModel):
    """One gallery model; unknown fields of the reference's entries are ignored."""

    model_config = ConfigDict(extra="ignore")

    name: str
    description: str = ""
    license: str = ""
    icon: str = ""
    url: str = ""
    urls: list[str] = []
    tags: list[str] = []
    config_file: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    files: list[ModelFile] = []
    variants: list[Variant] = []

    @field_validator("config_file", "overrides")
    @classmethod
    def _bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _expanded_size(value, CONFIG_VALUES_MAX) > CONFIG_VALUES_MAX:
            raise ValueError(f"holds more than {CONFIG_VALUES_MAX} values (YAML aliases?); refused")
        return value

    @field_validator("config_file", mode="before")
    @classmethod
    def _config_text(cls, value: Any) -> Any:
        if isinstance(value, str):  # the reference's galleries often carry config_file as a YAML string
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise ValueError(f"is not valid YAML: {exc}") from None
        return {} if value is None else value


@dataclass(frozen=True)
class GalleryModel:
    gallery: GalleryRef
    entry: ModelEntry

    @property
    def id(self) -> str:
        return f"{self.gallery.name}@{self.entry.name}"


def _expanded_size(doc: Any, limit: int) -> int:
    """How many values `doc` holds with aliases expanded, counting up to `limit + 1` (iterative)."""
    count, todo = 0, [doc]
    while todo and count <= limit:
        item = todo.pop()
        count += 1
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return count


def parse_model_index(data: bytes, gallery: GalleryRef, max_bytes: int) -> list[GalleryModel]:
    source = f"gallery {gallery.name!r} ({gallery.url})"
    if len(data) > max_bytes:
        raise GalleryError(
            f"{source}: the index is {len(data)} bytes; at most {max_bytes} ({INDEX_MAX_KNOB})"
        )
    try:
        doc: Any = yaml.safe_load(data)
    except (yaml.YAMLError, RecursionError) as exc:
        raise GalleryError(f"{source}: the index is not valid YAML/JSON: {exc}") from None
    if isinstance(doc, dict):
        doc = doc.get("models")
    if not isinstance(doc, list):
        raise GalleryError(f"{source}: the index must be a list of model entries (or {{models: [...]}})")
    if len(doc) > INDEX_MAX_ENTRIES:
        raise GalleryError(f"{source}: the index lists {len(doc)} entries; at most {INDEX_MAX_ENTRIES}")
    if _expanded_size(doc, EXPANDED_NODES_MAX) > EXPANDED_NODES_MAX:
        raise GalleryError(
            f"{source}: the index expands to more than {EXPANDED_NODES_MAX} values (YAML aliases); refused"
        )
    models = []
    for i, item in enumerate(doc):
        try:
            models.append(GalleryModel(gallery, ModelEntry.model_validate(item)))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            name = item.get("name") if isinstance(item, dict) else None
            named = f" ({name!r})" if isinstance(name, str) else ""
            raise GalleryError(f"{source}: entry {i}{named} field {where!r}: {first['msg']}") from None
    return models


def configured_galleries(raw: str) -> list[GalleryRef]:
    """The galleries of LOCALAI_GALLERIES; GalleryError naming the setting when it is malformed."""
    refs = parse_galleries(raw, GALLERIES_KNOB)
    for i, ref in enumerate(refs):
        scheme = urlparse(ref.url).scheme
        if scheme not in ("", "http", "https", "file"):
            raise GalleryError(f"{GALLERIES_KNOB}[{i}].url: scheme {scheme!r} is not http, https or file")
    return refs


def _local_index(ref: GalleryRef) -> Path | None:
    if is_url(ref.url):
        return None
    return Path(urlparse(ref.url).path if ref.url.startswith("file://") else ref.url)


def gallery_roots(refs: list[GalleryRef]) -> list[Path]:
    """The folders local files may come from: the folder of each configured local gallery index."""
    roots = []
    for ref in refs:
        index = _local_index(ref)
        if index is not None:
            roots.append(Path(os.path.realpath(index.parent)))
    return roots


class LocationRefused(ValueError):
    """A file's `uri` is not one corral downloads from; the message says why."""


def file_location(gallery: GalleryRef, uri: str, roots: list[Path]) -> str:
    """Where to download `uri` from: an http(s) URL, or a local path inside a configured gallery's folder."""
    if "\x00" in uri or not uri.strip():
        raise LocationRefused(
            "must be a non-empty http(s) URL or a file inside a configured gallery's folder"
        )
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        return uri
    if scheme in ("huggingface", "hf"):
        return huggingface_url(uri)
    if scheme not in ("", "file"):
        raise LocationRefused(
            f"scheme {scheme!r} is not downloaded: use http(s), or file:// inside a configured gallery's folder"
        )
    if scheme == "" and is_url(gallery.url):
        return urljoin(gallery.url, uri)  # relative to an index served over http(s)
    if scheme == "file":
        path = Path(urlparse(uri).path)
    else:
        index = _local_index(gallery)
        path = Path(uri) if Path(uri).is_absolute() or index is None else index.parent / uri
    real = Path(os.path.realpath(path))
    if not any(real == root or root in real.parents for root in roots):
        raise LocationRefused(
            f"{uri!r} is outside every configured local gallery's folder ({GALLERIES_KNOB}); refused"
        )
    return str(real)


def huggingface_url(uri: str) -> str:
    """`huggingface://<owner>/<repo>/<path>[@<branch>]` (the reference's file uris) as its https download URL."""
    rest = uri.split("://", 1)[1]
    rest, _, branch = rest.partition("@")
    parts = rest.split("/", 2)
    if len(parts) < 3 or not all(parts) or ".." in parts[2].split("/"):
        raise LocationRefused(f"{uri!r} must be huggingface://<owner>/<repo>/<path>[@<branch>]")
    return f"{HUGGINGFACE}/{parts[0]}/{parts[1]}/resolve/{branch or 'main'}/{parts[2]}"


def base_config_location(gallery: GalleryRef, url: str, roots: list[Path]) -> str:
    """An entry's `url` (its base config): `github:org/repo/path@branch` as the reference reads it, else as
    a file's uri."""
    if url.startswith("github:"):
        repo_path, _, branch = url.removeprefix("github:").partition("@")
        parts = repo_path.split("/", 2)
        if len(parts) < 3:
            raise LocationRefused(f"{url!r} must be github:<org>/<repo>/<path>[@<branch>]")
        return f"https://raw.githubusercontent.com/{parts[0]}/{parts[1]}/{branch or 'main'}/{parts[2]}"
    return file_location(gallery, url, roots)


def fetch_problem(exc: fetch.FetchError, size_knob: str) -> str:
    """A fetch error naming this gallery's knobs: its timeout, and the size cap that refused it."""
    message = str(exc).replace(fetch.TIMEOUT_KNOB, TIMEOUT_KNOB)
    return f"{message} (the cap is {size_knob})" if "; refused" in message else message


def read_location(location: str, max_bytes: int, timeout_s: float) -> bytes:
    """`fetch.read_bytes` naming this gallery's knobs (blocking: use a thread)."""
    try:
        return fetch.read_bytes(location, max_bytes, timeout_s)
    except fetch.FetchError as exc:
        raise GalleryError(fetch_problem(exc, INDEX_MAX_KNOB)) from None


@dataclass
class _Cached:
    at: float
    models: list[GalleryModel] | None
    error: str


@dataclass
class ModelIndexCache:
    """Each gallery's parsed index, reused for `ttl_s`; a failure is cached as briefly as a success (a
    broken gallery is not re-read on every listing). Reads run in threads, one per gallery at a time."""

    timeout_s: float
    max_bytes: int
    ttl_s: float
    _cache: dict[GalleryRef, _Cached] = field(default_factory=dict)
    _locks: dict[GalleryRef, asyncio.Lock] = field(default_factory=dict)

    async def models(self, ref: GalleryRef) -> list[GalleryModel]:
        """The gallery's models; GalleryError naming the gallery when its index cannot be used."""
        lock = self._locks.setdefault(ref, asyncio.Lock())
        async with lock:
            hit = self._cache.get(ref)
            if hit is None or time.monotonic() - hit.at >= self.ttl_s:
                try:
                    models = await asyncio.to_thread(self._read, ref)
                    hit = _Cached(time.monotonic(), models, "")
                except GalleryError as exc:
                    hit = _Cached(time.monotonic(), None, str(exc))
                self._cache[ref] = hit
        if hit.models is None:
            raise GalleryError(hit.error)
        return hit.models

    def _read(self, ref: GalleryRef) -> list[GalleryModel]:
        try:
            data = read_location(ref.url, self.max_bytes, self.timeout_s)
        except GalleryError as exc:
            raise GalleryError(f"gallery {ref.name!r} cannot be read: {exc}") from None
        return parse_model_index(data, ref, self.max_bytes)
