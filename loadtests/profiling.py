"""py-spy profiles of one service during one step of a ramp (``--profile SERVICE@RATE``).

When the step starts (after its settling time), ``py-spy record --format raw`` samples the
service for the rest of the step; the collapsed stacks are written to
``profile-<service>-<rate>.txt`` with a summary of the functions with the most own
(leaf) samples and the most total (inclusive) samples. py-spy is not a project
dependency: ``pip install py-spy==0.4.3`` into the venv; without it the option says so
and the run goes on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProfileRequest:
    service: str
    rate: int

    @classmethod
    def parse(cls, text: str) -> ProfileRequest:
        service, sep, rate = text.partition("@")
        if not sep or not service:
            raise ValueError(f"--profile {text!r}: expected SERVICE@RATE, e.g. features@10000")
        try:
            value = round(float(rate[:-1]) * 1000) if rate.lower().endswith("k") else int(rate)
        except ValueError:
            raise ValueError(f"--profile {text!r}: {rate!r} is not a step rate") from None
        return cls(service, value)


def py_spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def start_record(pid: int, seconds: float, raw_out: Path) -> subprocess.Popen[bytes] | None:
    exe = py_spy()
    if exe is None:
        return None
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))), "--rate", "100",
         "--format", "raw", "--output", str(raw_out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def function_of(frame: str) -> str:
    """'handle (services/features/processor.py:80)' → 'handle (services/features/processor.py)'."""
    head, sep, where = frame.rpartition(" (")
    if not sep:
        return frame
    path, colon, line = where.rstrip(")").rpartition(":")
    return f"{head} ({path})" if colon and line.isdigit() else frame


PROJECT_PACKAGES = frozenset({"services", "featurelib", "contracts", "simulator", "training", "loadtests"})


def package_of(frame: str) -> str:
    """'func (pydantic/main.py:847)' → 'pydantic'; 'run (<frozen runpy>:88)' → '<frozen runpy>'."""
    _, _, where = frame.rpartition(" (")
    path = where.rstrip(")")
    path = path.rsplit(":", 1)[0] if path.rsplit(":", 1)[-1].isdigit() else path
    if path.startswith("<"):
        return path
    parts = path.split("/")
    return parts[0] if len(parts) > 1 else path.removesuffix(".py")


def summarise(collapsed: str, top: int = 25) -> str:
    """Own samples per package and per function, and total samples per function, from py-spy's raw stacks."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [function_of(f) for f in stack.split(";")]
        own[frames[-1]] += count
        packages[package_of(frames[-1])] += count
        for frame in set(frames):
            total[frame] += count
    if not samples:
        return "no samples\n"
    lines = [f"{samples} samples", "", "own (leaf) samples per package:"]
    lines += [f"{100 * n / samples:6.1f}%  {pkg}" for pkg, n in packages.most_common(15)]
    lines += ["", "own (leaf) samples:"]
    lines += [f"{100 * n / samples:6.1f}%  {frame}" for frame, n in own.most_common(top)]
    mine = [(frame, n) for frame, n in total.most_common() if package_of(frame) in PROJECT_PACKAGES][:top]
    lines += ["", "project functions, total (inclusive) samples:"]
    lines += [f"{100 * n / samples:6.1f}%  {frame}" for frame, n in mine]
    lines += ["", "total (inclusive) samples:"]
    lines += [f"{100 * n / samples:6.1f}%  {frame}" for frame, n in total.most_common(top)]
    return "\n".join(lines) + "\n"
