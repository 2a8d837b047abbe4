"""Parsing of nvidia-smi output (pure)."""

from __future__ import annotations

from corral.worker.hardware import MIB, parse_nvidia_smi


def test_vram_is_summed_over_gpus() -> None:
    assert parse_nvidia_smi("24576, 20000\n24576, 1000\n") == (49152 * MIB, 21000 * MIB)


def test_gpus_that_cannot_report_memory_are_skipped() -> None:
    assert parse_nvidia_smi("[N/A], [N/A]\n81920, 80000\n") == (81920 * MIB, 80000 * MIB)
    assert parse_nvidia_smi("") == (0, 0)
