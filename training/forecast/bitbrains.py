"""Bitbrains GWA-T-12 per-VM files (``<any dir>/<vm>.csv[.gz]``) -> utilisation series.

Format (see ../shared/data/README.md): a header row, fields separated by ``;`` plus a tab.
Columns used: ``Timestamp [ms]`` (really epoch *seconds*), ``CPU usage [%]``,
``Memory capacity provisioned [KB]``, ``Memory usage [KB]``. CPU % is taken as is and memory % is
usage / capacity * 100 (NaN when the capacity is 0); both are clipped to 0..100 because the online
side reads ``NodeState.cpu_util`` / ``mem_util``, which are fractions in 0..1. A VM is named by its
file name without ``.csv[.gz]``; files of the same VM in several directories (months) are one series,
ordered by their first timestamp. Nothing else is read from names (times come from the rows).
Errors name ``file:line`` (line 1 = header).
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import polars as pl

from training.errors import IngestError

TIME: Final = "Timestamp [ms]"
CPU_PCT: Final = "CPU usage [%]"
MEM_CAP: Final = "Memory capacity provisioned [KB]"
MEM_USED: Final = "Memory usage [KB]"
REQUIRED: Final = (TIME, CPU_PCT, MEM_CAP, MEM_USED)
IO_COLUMNS: Final = ("Disk read throughput [KB/s]", "Disk write throughput [KB/s]",
                     "Network received throughput [KB/s]", "Network transmitted throughput [KB/s]")


class BitbrainsLineError(IngestError, ValueError):
    """A line that cannot be used: ``<file>:<line>: <reason>`` (a ValueError too, for the replay CLI)."""

    def __init__(self, path: Path | str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = str(path)
        self.line = line


@dataclass(frozen=True, slots=True)
class Row:
    time_s: int
    cpu_pct: float
    mem_pct: float
    line: int


@dataclass(frozen=True, slots=True)
class Series:
    vm: str
    time_s: np.ndarray
    cpu_pct: np.ndarray
    mem_pct: np.ndarray
    files: tuple[Path, ...]


def vm_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name


def find_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise IngestError(f"{path}: no such file or directory")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".csv", ".csv.gz")))
    if not files:
        raise IngestError(f"{path}: no Bitbrains files (<vm>.csv or <vm>.csv.gz) under it")
    return files


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _header_index(path: Path, header: str) -> dict[str, int]:
    names = [c.strip() for c in header.rstrip("\r\n").split(";")]
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise BitbrainsLineError(path, 1, f"header lacks {', '.join(repr(m) for m in missing)}")
    return {c: names.index(c) for c in REQUIRED}


def _number(text: str, column: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BitbrainsLineError(path, line, f"{column}: not a number ({text!r})") from None
    if not math.isfinite(value) or value < 0:
        raise BitbrainsLineError(path, line, f"{column}: must be a finite number >= 0 (got {text})")
    return value


def _clip(x: float) -> float:
    return min(max(x, 0.0), 100.0)


def parse_line(raw: str, cols: dict[str, int], width: int, path: Path, line: int) -> Row:
    fields = [f.strip() for f in raw.rstrip("\r\n").split(";")]
    if len(fields) != width:
        raise BitbrainsLineError(path, line, f"expected {width} fields separated by ';', got {len(fields)}")
    t = _number(fields[cols[TIME]], TIME, path, line)
    if t != int(t):
        raise BitbrainsLineError(path, line, f"{TIME}: not whole seconds ({fields[cols[TIME]]!r})")
    cpu = _number(fields[cols[CPU_PCT]], CPU_PCT, path, line)
    cap = _number(fields[cols[MEM_CAP]], MEM_CAP, path, line)
    used = _number(fields[cols[MEM_USED]], MEM_USED, path, line)
    mem = used / cap * 100.0 if cap > 0 else math.nan
    return Row(int(t), _clip(cpu), _clip(mem) if mem == mem else mem, line)


def read_rows(path: Path) -> Iterator[Row]:
    """Every data row of one file, in file order (slow path: the replay, and locating a bad line)."""
    with _open_text(path) as fh:
        header = fh.readline()
        if not header.strip():
            raise BitbrainsLineError(path, 1, "empty file (a header row is required)")
        cols = _header_index(path, header)
        width = len(header.split(";"))
        for number, raw in enumerate(fh, start=2):
            if raw.strip():
                yield parse_line(raw, cols, width, path, number)


def read_file(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time_s int64, cpu %, mem %) of one file; fast polars path, the line parser names any bad line."""
    try:
        frame = pl.read_csv(path, separator=";", infer_schema=False, has_header=True)
        frame = frame.rename({c: c.strip() for c in frame.columns})
        if any(c not in frame.columns for c in REQUIRED):
            raise ValueError("header")
        cols = frame.select(pl.col(c).str.strip_chars().cast(pl.Float64, strict=True) for c in REQUIRED)
        t, cpu, cap, used = (cols[c].to_numpy() for c in REQUIRED)
        if (np.isnan(t).any() or np.isnan(cpu).any() or np.isnan(cap).any() or np.isnan(used).any()
                or (t < 0).any() or (cpu < 0).any() or (cap < 0).any() or (used < 0).any()
                or not np.isfinite(cpu).all() or not np.isfinite(used).all() or (t != np.floor(t)).any()):
            raise ValueError("values")
    except (pl.exceptions.PolarsError, ValueError, OSError, EOFError, UnicodeDecodeError) as exc:
        if isinstance(exc, OSError | EOFError | UnicodeDecodeError) and not isinstance(exc, FileNotFoundError):
            raise IngestError(f"{path}: unreadable ({exc})") from None
        rows = list(read_rows(path))  # raises BitbrainsLineError naming the line
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
        return (np.array([r.time_s for r in rows], dtype=np.int64), np.array([r.cpu_pct for r in rows]),
                np.array([r.mem_pct for r in rows]))
    with np.errstate(invalid="ignore", divide="ignore"):
        mem = np.where(cap > 0, used / np.where(cap > 0, cap, 1.0) * 100.0, np.nan)
    return t.astype(np.int64), np.clip(cpu, 0.0, 100.0), np.clip(mem, 0.0, 100.0)


def vm_files(path: Path) -> dict[str, list[Path]]:
    """Files per VM name (sorted by path; :func:`load_series` orders them by time)."""
    out: dict[str, list[Path]] = {}
    for file in find_files(path):
        out.setdefault(vm_name(file), []).append(file)
    return out


def load_series(vm: str, files: list[Path]) -> Series:
    parts = [(f, *read_file(f)) for f in files]
    parts = [p for p in parts if len(p[1])]
    parts.sort(key=lambda p: int(p[1][0]))
    if not parts:
        return Series(vm, np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), tuple(files))
    return Series(vm, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                  np.concatenate([p[3] for p in parts]), tuple(p[0] for p in parts))


def load_io(files: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time_s, log1p(disk read + write KB/s), log1p(network received + transmitted KB/s)) of one VM's files, in
    time order. For the recipe screen only (``training.forecast.screen``, candidates ``io``): ``NodeState`` has no
    I/O, so nothing served reads these columns. A missing column or a value that is not a finite number >= 0 is
    an :class:`IngestError` naming the file."""
    parts: list[np.ndarray] = []
    for path in files:
        try:
            frame = pl.read_csv(path, separator=";", infer_schema=False, has_header=True)
            frame = frame.rename({c: c.strip() for c in frame.columns})
            missing = [c for c in (TIME, *IO_COLUMNS) if c not in frame.columns]
            if missing:
                raise ValueError(f"header lacks {', '.join(repr(m) for m in missing)}")
            a = frame.select(pl.col(c).str.strip_chars().cast(pl.Float64, strict=True)
                             for c in (TIME, *IO_COLUMNS)).to_numpy()
        except (pl.exceptions.PolarsError, ValueError, OSError, EOFError, UnicodeDecodeError) as exc:
            raise IngestError(f"{path}: I/O columns unreadable ({exc})") from None
        if not np.isfinite(a).all() or (a < 0).any():
            raise IngestError(f"{path}: I/O columns must be finite numbers >= 0")
        if len(a):
            parts.append(a)
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    parts.sort(key=lambda a: float(a[0, 0]))
    a = np.concatenate(parts)
    return a[:, 0].astype(np.int64), np.log1p(a[:, 1] + a[:, 2]), np.log1p(a[:, 3] + a[:, 4])
