"""Hardware facts a worker reports: RAM from /proc/meminfo, disk of the models filesystem."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HardwareFacts:
    total_ram: int = 0
    available_ram: int = 0
    total_disk: int = 0
    available_disk: int = 0
    total_vram: int = 0
    available_vram: int = 0
    gpu_vendor: str = ""


def _meminfo_bytes(meminfo: Path) -> tuple[int, int]:
    values: dict[str, int] = {}
    try:
        for line in meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                values[key] = int(parts[0]) * 1024
    except OSError:
        return 0, 0
    return values.get("MemTotal", 0), values.get("MemAvailable", values.get("MemFree", 0))


def probe(models_dir: Path, meminfo: Path = Path("/proc/meminfo")) -> HardwareFacts:
    total_ram, available_ram = _meminfo_bytes(meminfo)
    try:
        os.makedirs(models_dir, exist_ok=True)
        usage = shutil.disk_usage(models_dir)
        total_disk, available_disk = usage.total, usage.free
    except OSError:
        total_disk = available_disk = 0
    return HardwareFacts(total_ram, available_ram, total_disk, available_disk)
