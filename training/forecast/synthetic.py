"""Small Bitbrains-layout datasets the project generates itself (tests, smoke runs; no real data needed).

``write_dataset(root, vms, start, days)`` writes ``root/<YYYY-M>/<vm>.csv.gz`` with the original header,
``;\\t`` separators and one row per 300 s (a seeded per-VM phase offset and jitter, occasional gaps):
CPU % = daily cycle + AR(1) noise + rare spikes, memory % = slow drift + daily cycle + noise.
"""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path
from typing import Final

import numpy as np

HEADER: Final = ("Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%];\t"
                 "Memory capacity provisioned [KB];\tMemory usage [KB];\tDisk read throughput [KB/s];\t"
                 "Disk write throughput [KB/s];\tNetwork received throughput [KB/s];\t"
                 "Network transmitted throughput [KB/s]")


def vm_rows(seed: int, start_s: int, days: float) -> list[tuple[int, float, float]]:
    rng = np.random.default_rng(seed)
    n = int(days * 288)
    t = start_s + int(rng.integers(0, 300)) + np.arange(n) * 300 + rng.integers(-1, 2, size=n)
    hour = (t % 86_400) / 3600.0
    level = rng.uniform(5, 40)
    amp = rng.uniform(0, 25)
    daily = amp * np.clip(np.sin((hour - 6) / 24 * 2 * np.pi), 0, None)
    noise = np.zeros(n)
    for i in range(1, n):
        noise[i] = 0.9 * noise[i - 1] + rng.normal(0, 2.0)
    spikes = (rng.random(n) < 0.01) * rng.uniform(10, 50, size=n)
    cpu = np.clip(level + daily + noise + spikes, 0, 100)
    mem_level = rng.uniform(20, 70) + np.cumsum(rng.normal(0, 0.05, size=n))
    mem = np.clip(mem_level + 0.3 * daily + rng.normal(0, 1.0, size=n), 1, 99)
    keep = rng.random(n) > 0.01  # gaps
    return [(int(a), float(b), float(c)) for a, b, c, k in zip(t, cpu, mem, keep, strict=True) if k]


def write_dataset(root: Path, vms: int = 12, start: str = "2013-08-18T00:00:00+00:00", days: float = 20.0,
                  seed: int = 0) -> Path:
    """Write ``vms`` VMs split into per-month files like the real trace; returns ``root``."""
    start_s = int(dt.datetime.fromisoformat(start).timestamp())
    for v in range(1, vms + 1):
        rows = vm_rows(seed * 1000 + v, start_s, days)
        months: dict[str, list[tuple[int, float, float]]] = {}
        for row in rows:
            when = dt.datetime.fromtimestamp(row[0], dt.UTC)
            months.setdefault(f"{when.year}-{when.month}", []).append(row)
        for month, month_rows in months.items():
            path = root / month / f"{v}.csv.gz"
            path.parent.mkdir(parents=True, exist_ok=True)
            cap_kb = 8_388_608.0
            lines = [HEADER]
            for t, cpu, mem in month_rows:
                lines.append(f"{t};\t2;\t5851.9989;\t{cpu * 58.519989};\t{cpu};\t{cap_kb};\t{mem / 100 * cap_kb};\t"
                             "0.0;\t1.0;\t0.5;\t0.5")
            path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=1))
    return root
