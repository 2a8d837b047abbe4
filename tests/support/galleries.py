"""Test galleries: the reference-layout test backend (refbackend/) with its own wheel, as a directory and archives.

`refbackend` needs `refdep`, a package that exists only as a wheel built here (no registry):
installing it proves the backend's own venv is used; `grpcio`/`protobuf` come from the worker
(`inherit_worker_packages`), so installs are fast and offline.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import yaml

from corral.gallery.index import GalleryRef
from corral.gallery.installer import BackendInstaller
from corral.gallery.manager import BackendManager
from corral.gallery.registry import BackendRegistry

REF_BACKEND_SRC = Path(__file__).parent / "refbackend"
PROTO = Path(__file__).resolve().parents[2] / "src" / "corral" / "proto" / "backend.proto"


def make_wheel(wheel_dir: Path, name: str, version: str, modules: dict[str, str]) -> Path:
    """A pure-Python wheel written by hand (a zip with dist-info): no build backend needed."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        **{f"{mod}.py": src for mod, src in modules.items()},
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: corral-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record: list[str] = []
    for recorded, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{recorded},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    path = wheel_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name_in_zip, text in files.items():
            zf.writestr(name_in_zip, text)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


def ref_backend_dir(dest: Path) -> Path:
    """A copy of refbackend/ with its stubs generated from backend.proto and its wheel dir: the reference layout."""
    shutil.copytree(REF_BACKEND_SRC, dest, ignore=shutil.ignore_patterns("*.txt", "__pycache__"))
    shutil.copy(REF_BACKEND_SRC / "requirements.txt", dest / "requirements.txt")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO.parent}",
            f"--python_out={dest}",
            f"--grpc_python_out={dest}",
            str(PROTO),
        ],
        check=True,
        capture_output=True,
    )
    make_wheel(
        dest / "wheels", "refdep", "1.0.0", {"refdep": (REF_BACKEND_SRC / "refdep.py.txt").read_text()}
    )
    return dest


PYTHON_SECTION = {
    "requirements": "requirements.txt",
    "find_links": ["wheels"],
    "no_index": True,
    "inherit_worker_packages": True,
}


def tar_gz(source: Path, archive: Path, top: str | None = None) -> str:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=top or ".")
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def write_index(path: Path, entries: list[dict[str, object]]) -> Path:
    path.write_text(yaml.safe_dump(entries))
    return path


def ref_gallery(root: Path) -> Path:
    """An index with `refbackend` (a directory) and `refarchive` (the same as a .tar.gz with its digest)."""
    source = ref_backend_dir(root / "refbackend")
    digest = tar_gz(source, root / "refarchive.tar.gz")
    return write_index(
        root / "index.yaml",
        [
            {
                "name": "refbackend",
                "alias": "ref",
                "description": "reference-layout test backend",
                "uri": "refbackend",
                "python": PYTHON_SECTION,
                "version": "1.0.0",
            },
            {"name": "refarchive", "uri": "refarchive.tar.gz", "sha256": digest, "python": PYTHON_SECTION},
        ],
    )


def zip_bytes(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16
            zf.writestr(info, target)
    return buf.getvalue()


def make_manager(
    backends: Path,
    galleries: list[GalleryRef],
    *,
    require_integrity: bool = False,
    timeout_s: float = 30.0,
    builtins: bool = False,
) -> BackendManager:
    """A manager over `backends` only (with `builtins`: corral's llama-cpp and simulator too)."""
    installer = BackendInstaller(backends, require_integrity=require_integrity, timeout_s=timeout_s)
    registry = BackendRegistry(backends, None) if builtins else BackendRegistry(backends, None, None)
    return BackendManager(registry, installer, galleries, timeout_s=timeout_s)
