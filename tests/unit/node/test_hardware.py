"""Parsing of nvidia-smi output (pure)."""

from __future__ import annotations

from corral.node.hardware import MIB, cuda_major, parse_nvidia_smi


def test_vram_is_summed_over_gpus() -> None:
    assert parse_nvidia_smi("24576, 20000\n24576, 1000\n") == (49152 * MIB, 21000 * MIB)


def test_gpus_that_cannot_report_memory_are_skipped() -> None:
    assert parse_nvidia_smi("[N/A], [N/A]\n81920, 80000\n") == (81920 * MIB, 80000 * MIB)
    assert parse_nvidia_smi("") == (0, 0)


def test_the_cuda_major_version_comes_from_the_nvidia_smi_banner() -> None:
    banner = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
    assert cuda_major(banner) == 12
    assert cuda_major("CUDA Version                              : 13.0\n") == 13  # `nvidia-smi -q`
    assert cuda_major("24576, 20000\n") is None
