"""Shared by the forecaster's tests: which VMs a command reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.forecast import bitbrains


def record_vm_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every VM ``bitbrains.load_series`` is asked for from now on, in order (the read still happens)."""
    read: list[str] = []
    real = bitbrains.load_series

    def spy(vm: str, files: list[Path]) -> bitbrains.Series:
        read.append(vm)
        return real(vm, files)

    monkeypatch.setattr(bitbrains, "load_series", spy)
    return read
