"""Hardware facts a worker reports: RAM, VRAM and the disk of its models directory.

* RAM from /proc/meminfo (MemTotal, MemAvailable), on every registration and beat.
* Discrete NVIDIA GPUs: `nvidia-smi` on PATH, per GPU, summed; vendor `nvidia`.
* Unified-memory SoCs (Jetson, DGX Spark / GB10, Thor), detected from `<sysfs>/devices/soc0/family`
  and `soc_id`: CPU and GPU share RAM, so RAM figures are reported as VRAM (free VRAM tracks
  MemAvailable) and no `nvidia-smi` is needed.
* Disk: the filesystem holding the models directory (not the root filesystem).
* Capability (once, at registration; reference: `pkg/system/capabilities.go`): what builds of a backend this
  node runs — `nvidia-cuda-<major>` from the CUDA version `nvidia-smi` prints (`nvidia` when it prints none),
  `nvidia-l4t[-cuda-<major>]` on a unified-memory SoC, `default` (CPU builds) without a GPU; the worker's
  `--capability` / LOCALAI_FORCE_META_BACKEND_CAPABILITY overrides it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NVIDIA_SMI_TIMEOUT_S = 5.0
MIB = 1 << 20
NVIDIA_JEP106 = "jep106:036b"  # NVIDIA's JEDEC manufacturer id, as Arm SoCs expose it in soc_id
UNIFIED_FAMILIES = ("tegra",)
DEFAULT_CAPABILITY = "default"  # the reference's name for "no GPU build applies": CPU builds
CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*(\d+)\.")


@dataclass(frozen=True)
class HardwareFacts:
    total_ram: int = 0
    available_ram: int = 0
    total_disk: int = 0
    available_disk: int = 0
    total_vram: int = 0
    available_vram: int = 0
    gpu_vendor: str = ""
    unified_memory: bool = False

    @property
    def gpu_known(self) -> bool:
        return bool(self.gpu_vendor)


def _meminfo_bytes(meminfo: Path) -> tuple[int, int]:
    values: dict[str, int] = {}
    try:
        for line in meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                values[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        return 0, 0
    return values.get("MemTotal", 0), values.get("MemAvailable", values.get("MemFree", 0))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip().lower()
    except OSError:
        return ""


def is_unified_memory_soc(sysfs_root: Path) -> bool:
    soc = sysfs_root / "devices" / "soc0"
    family, soc_id = _read(soc / "family"), _read(soc / "soc_id")
    return any(f in family for f in UNIFIED_FAMILIES) or soc_id.startswith(NVIDIA_JEP106) or "tegra" in soc_id


def parse_nvidia_smi(output: str) -> tuple[int, int]:
    """(total, free) bytes summed over GPUs from `--query-gpu=memory.total,memory.free` CSV in MiB.
    Lines a GPU cannot fill (`[N/A]`, `[Not Supported]`) are skipped."""
    total = free = 0
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        try:
            gpu_total, gpu_free = int(float(parts[0])), int(float(parts[1]))
        except ValueError:
            continue
        total += gpu_total * MIB
        free += gpu_free * MIB
    return total, free


def _nvidia_smi(*args: str) -> str | None:
    """`nvidia-smi`'s output, or None when there is no usable nvidia-smi (missing, failing, hanging)."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        result = subprocess.run(
            [binary, *args],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning(
            "nvidia-smi failed (%s); GPU facts unknown this time (containers need "
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility and an init process)",
            exc,
        )
        return None
    if result.returncode != 0:
        log.warning("nvidia-smi exited with %d: %s", result.returncode, result.stderr.strip()[:200])
        return None
    return result.stdout


def nvidia_vram() -> tuple[int, int] | None:
    """(total, free) VRAM from nvidia-smi, or None when there is no usable nvidia-smi."""
    output = _nvidia_smi("--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits")
    if output is None:
        return None
    total, free = parse_nvidia_smi(output)
    return (total, free) if total else None


def cuda_major(nvidia_smi_output: str) -> int | None:
    """The CUDA major version in `nvidia-smi`'s banner (`… CUDA Version: 12.4 …`), if it names one."""
    match = CUDA_VERSION.search(nvidia_smi_output)
    return int(match.group(1)) if match else None


def capability(facts: HardwareFacts, forced: str = "") -> str:
    """The node's backend capability (reference names): forced, else from the GPU found, else `default`."""
    if forced:
        return forced
    if facts.gpu_vendor != "nvidia":
        return facts.gpu_vendor or DEFAULT_CAPABILITY
    family = "nvidia-l4t" if facts.unified_memory else "nvidia"
    major = cuda_major(_nvidia_smi() or "")
    return f"{family}-cuda-{major}" if major is not None else family


def probe(
    models_dir: Path, meminfo: Path = Path("/proc/meminfo"), sysfs_root: Path = Path("/sys")
) -> HardwareFacts:
    total_ram, available_ram = _meminfo_bytes(meminfo)
    try:
        os.makedirs(models_dir, exist_ok=True)
        usage = shutil.disk_usage(models_dir)
        total_disk, available_disk = usage.total, usage.free
    except OSError:
        total_disk = available_disk = 0
    facts = HardwareFacts(total_ram, available_ram, total_disk, available_disk)
    if is_unified_memory_soc(sysfs_root):
        return HardwareFacts(
            total_ram,
            available_ram,
            total_disk,
            available_disk,
            total_vram=total_ram,
            available_vram=available_ram,
            gpu_vendor="nvidia",
            unified_memory=True,
        )
    vram = nvidia_vram()
    if vram is not None:
        return HardwareFacts(
            total_ram,
            available_ram,
            total_disk,
            available_disk,
            total_vram=vram[0],
            available_vram=vram[1],
            gpu_vendor="nvidia",
        )
    return facts
