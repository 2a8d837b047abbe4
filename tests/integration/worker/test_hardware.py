"""Hardware probe with a fake `nvidia-smi` on PATH and a fake sysfs root, and on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.node import hardware

MIB = 1 << 20


def _fake_nvidia_smi(bin_dir: Path, output: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\n")
    script.chmod(0o755)


def _meminfo(path: Path, total_kib: int, available_kib: int) -> Path:
    path.write_text(f"MemTotal: {total_kib} kB\nMemFree: 1 kB\nMemAvailable: {available_kib} kB\n")
    return path


def test_discrete_gpus_report_summed_vram_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path / "bin", "24576, 20000\n24576, 4000\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    facts = hardware.probe(
        tmp_path / "models", meminfo=_meminfo(tmp_path / "meminfo", 1000, 500), sysfs_root=tmp_path / "sys"
    )
    assert (facts.gpu_vendor, facts.total_vram, facts.available_vram) == ("nvidia", 49152 * MIB, 24000 * MIB)
    assert (facts.total_ram, facts.available_ram) == (1000 * 1024, 500 * 1024)  # RAM reported separately


@pytest.mark.parametrize(
    "family, soc_id", [("Tegra\n", "TEGRA234\n"), ("jep106:036b\n", "jep106:036b:8901\n")]
)
def test_unified_memory_socs_report_ram_as_vram_without_nvidia_smi(
    tmp_path: Path, family: str, soc_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    soc = tmp_path / "sys" / "devices" / "soc0"
    soc.mkdir(parents=True)
    (soc / "family").write_text(family)
    (soc / "soc_id").write_text(soc_id)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    facts = hardware.probe(
        tmp_path / "models",
        meminfo=_meminfo(tmp_path / "meminfo", 64 << 20, 50 << 20),
        sysfs_root=tmp_path / "sys",
    )
    assert facts.unified_memory and facts.gpu_vendor == "nvidia"
    assert (
        (facts.total_vram, facts.available_vram)
        == (facts.total_ram, facts.available_ram)
        == (64 << 30, 50 << 30)
    )


def test_this_machine_without_a_gpu_reports_ram_and_the_models_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    facts = hardware.probe(tmp_path / "models", sysfs_root=tmp_path / "sys")
    assert facts.gpu_vendor == "" and facts.total_vram == 0
    assert facts.total_ram > 0 and facts.available_ram > 0
    assert (
        facts.total_disk
        == os.statvfs(tmp_path / "models").f_blocks * os.statvfs(tmp_path / "models").f_frsize
    )


def test_a_failing_nvidia_smi_leaves_vram_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVML not found' >&2\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert hardware.probe(tmp_path / "models", sysfs_root=tmp_path / "sys").gpu_vendor == ""


def _gpu_nvidia_smi(bin_dir: Path, banner: str) -> None:
    """A fake `nvidia-smi`: the memory CSV for a query, else its banner (which names the CUDA version)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in --query-gpu=*) echo "24576, 20000" ;; *) echo "{banner}" ;; esac\n'
    )
    script.chmod(0o755)


@pytest.mark.parametrize(
    "banner, expected",
    [
        ("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |", "nvidia-cuda-12"),
        ("| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |", "nvidia-cuda-13"),
        ("| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06 |", "nvidia"),  # no CUDA version printed
    ],
)
def test_a_node_with_nvidia_smi_reports_its_cuda_capability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, banner: str, expected: str
) -> None:
    _gpu_nvidia_smi(tmp_path / "bin", banner)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    facts = hardware.probe(tmp_path / "models", sysfs_root=tmp_path / "sys")
    assert hardware.capability(facts) == expected


def test_a_node_without_a_gpu_reports_the_default_capability_and_a_forced_one_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    facts = hardware.probe(tmp_path / "models", sysfs_root=tmp_path / "sys")
    assert hardware.capability(facts) == "default"
    assert hardware.capability(facts, forced="metal") == "metal"


def test_a_unified_memory_soc_reports_the_l4t_capability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    soc = tmp_path / "sys" / "devices" / "soc0"
    soc.mkdir(parents=True)
    (soc / "family").write_text("Tegra\n")
    (soc / "soc_id").write_text("TEGRA234\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    facts = hardware.probe(tmp_path / "models", sysfs_root=tmp_path / "sys")
    assert hardware.capability(facts) == "nvidia-l4t"
    _gpu_nvidia_smi(tmp_path / "bin", "| NVIDIA-SMI 540.4.0   Driver Version: 540.4.0   CUDA Version: 12.6 |")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert hardware.capability(facts) == "nvidia-l4t-cuda-12"
