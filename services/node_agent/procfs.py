"""Utilisation and CPU frequency from /proc and sysfs (no PMU needed)."""

from __future__ import annotations

import glob
import os


class CpuUtil:
    """Busy share of all CPUs between two reads of /proc/stat (idle and iowait count as idle)."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.path = os.path.join(proc_root, "stat")
        self._last = self._read()

    def _read(self) -> tuple[int, int] | None:
        try:
            with open(self.path, encoding="ascii") as fh:
                line = fh.readline()
        except OSError:
            return None
        fields = line.split()
        if not fields or fields[0] != "cpu":
            return None
        values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
        total = sum(values)
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return total, total - idle

    def sample(self) -> float | None:
        current = self._read()
        last, self._last = self._last, current
        if current is None or last is None:
            return None
        total = current[0] - last[0]
        if total <= 0:
            return 0.0
        return min(1.0, max(0.0, (current[1] - last[1]) / total))


def mem_util(proc_root: str = "/proc") -> float | None:
    """1 - MemAvailable / MemTotal."""
    values: dict[str, int] = {}
    try:
        with open(os.path.join(proc_root, "meminfo"), encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    values[key] = int(rest.split()[0])
                    if len(values) == 2:
                        break
    except (OSError, ValueError, IndexError):
        return None
    total = values.get("MemTotal", 0)
    if total <= 0 or "MemAvailable" not in values:
        return None
    return min(1.0, max(0.0, 1.0 - values["MemAvailable"] / total))


def cpu_freq_mhz(sysfs_root: str = "/sys", proc_root: str = "/proc") -> float | None:
    """Mean current CPU frequency (recorded for operators; excluded from regime features)."""
    paths = glob.glob(os.path.join(sysfs_root, "devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))
    khz = []
    for path in paths:
        try:
            with open(path, encoding="ascii") as fh:
                khz.append(int(fh.read().strip()))
        except (OSError, ValueError):
            continue
    if khz:
        return round(sum(khz) / len(khz) / 1000.0, 1)
    mhz = []
    try:
        with open(os.path.join(proc_root, "cpuinfo"), encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("cpu MHz"):
                    mhz.append(float(line.split(":", 1)[1]))
    except (OSError, ValueError):
        return None
    return round(sum(mhz) / len(mhz), 1) if mhz else None
