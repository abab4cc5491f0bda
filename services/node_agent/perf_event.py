"""Linux ``perf_event_open(2)`` through ctypes: open counting events and read them with times.

Only counting mode is used (no sampling, no mmap ring): each event is opened with
``read_format = TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING`` so one ``read`` returns
(value, time enabled, time running) — exactly what multiplexing scaling needs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass
from typing import Any, Final

# perf_event_attr.type
TYPE_HARDWARE: Final = 0
TYPE_SOFTWARE: Final = 1
TYPE_TRACEPOINT: Final = 2
TYPE_HW_CACHE: Final = 3
TYPE_RAW: Final = 4

HW_CONFIG: Final = {
    "cycles": 0,
    "instructions": 1,
    "cache-references": 2,
    "cache-misses": 3,
    "branch-instructions": 4,
    "branch-misses": 5,
    "bus-cycles": 6,
    "stalled-cycles-frontend": 7,
    "stalled-cycles-backend": 8,
    "ref-cycles": 9,
}
SW_CONFIG: Final = {
    "cpu-clock": 0,
    "task-clock": 1,
    "page-faults": 2,
    "context-switches": 3,
    "cpu-migrations": 4,
    "minor-faults": 5,
    "major-faults": 6,
}
_LL, _OP_READ, _OP_WRITE, _ACCESS, _MISS = 2, 0, 1, 0, 1
CACHE_CONFIG: Final = {
    "LLC-loads": _LL | (_OP_READ << 8) | (_ACCESS << 16),
    "LLC-load-misses": _LL | (_OP_READ << 8) | (_MISS << 16),
    "LLC-stores": _LL | (_OP_WRITE << 8) | (_ACCESS << 16),
    "LLC-store-misses": _LL | (_OP_WRITE << 8) | (_MISS << 16),
}

FORMAT_TOTAL_TIME_ENABLED: Final = 1 << 0
FORMAT_TOTAL_TIME_RUNNING: Final = 1 << 1
FLAG_FD_CLOEXEC: Final = 1 << 3
FLAG_PID_CGROUP: Final = 1 << 2
# attr flag bits
_EXCLUDE_USER: Final = 1 << 4
_EXCLUDE_KERNEL: Final = 1 << 5
_EXCLUDE_HV: Final = 1 << 6
IOC_ENABLE: Final = 0x2400
IOC_DISABLE: Final = 0x2401

_SYSCALL_NR: Final = {
    "x86_64": 298,
    "amd64": 298,
    "aarch64": 241,
    "arm64": 241,
    "i386": 336,
    "i686": 336,
    "riscv64": 241,
}
_READ: Final = struct.Struct("=QQQ")


class PerfAttr(ctypes.Structure):
    """struct perf_event_attr (PERF_ATTR_SIZE_VER8, 136 bytes); flags as one u64 bitfield word."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),
        ("reserved_3", ctypes.c_uint32),
        ("sig_data", ctypes.c_uint64),
        ("config3", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class EventSpec:
    """What to pass to perf_event_open for one event."""

    name: str
    """The spelling recorded in supported_events (e.g. ``cycles``, ``cpu/event=0x3c/``, ``r0280``)."""
    type: int
    config: int
    config1: int = 0
    config2: int = 0
    exclude_user: bool = False
    exclude_kernel: bool = False
    scale: float = 1.0
    """Multiply counts by this (sysfs ``.scale``, e.g. IMC CAS counts to bytes)."""
    cpus: tuple[int, ...] | None = None
    """Restrict to these CPUs (uncore PMUs count per socket via one CPU in their cpumask)."""


class PerfEventError(OSError):
    """perf_event_open failed; ``errno`` tells why (ENOENT/EOPNOTSUPP: not supported here)."""


_libc: ctypes.CDLL | None = None


def _syscall() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fn = _libc.syscall
    fn.restype = ctypes.c_long
    return fn


def available() -> bool:
    """True when this platform has a known perf_event_open syscall number."""
    return os.name == "posix" and platform.machine().lower() in _SYSCALL_NR


def open_counter(spec: EventSpec, *, cpu: int, pid: int = -1, cgroup_fd: int | None = None) -> int:
    """Open one counting event on ``cpu`` (system-wide when pid=-1), enabled immediately."""
    nr = _SYSCALL_NR.get(platform.machine().lower())
    if nr is None:
        raise PerfEventError(errno.ENOSYS, f"perf_event_open: unsupported platform {platform.machine()}")
    attr = PerfAttr()
    attr.type = spec.type
    attr.size = ctypes.sizeof(PerfAttr)
    attr.config = spec.config
    attr.config1 = spec.config1
    attr.config2 = spec.config2
    attr.read_format = FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING
    flags = 0
    if spec.exclude_user:
        flags |= _EXCLUDE_USER
    if spec.exclude_kernel:
        flags |= _EXCLUDE_KERNEL | _EXCLUDE_HV
    attr.flags = flags
    open_flags = FLAG_FD_CLOEXEC
    target = pid
    if cgroup_fd is not None:
        open_flags |= FLAG_PID_CGROUP
        target = cgroup_fd
    fd = int(_syscall()(nr, ctypes.byref(attr), target, cpu, -1, open_flags))
    if fd < 0:
        err = ctypes.get_errno()
        raise PerfEventError(err, f"perf_event_open({spec.name}, cpu={cpu}): {os.strerror(err)}")
    return fd


def read_counter(fd: int) -> tuple[int, int, int]:
    """(value, time_enabled_ns, time_running_ns) — cumulative since open."""
    data = os.read(fd, _READ.size)
    if len(data) != _READ.size:
        raise PerfEventError(errno.EIO, f"short read from perf fd {fd}: {len(data)} bytes")
    value, enabled, running = _READ.unpack(data)
    return value, enabled, running


def online_cpus(sysfs_root: str = "/sys") -> list[int]:
    """Online CPUs from sysfs (``0-3,6``), falling back to os.cpu_count()."""
    try:
        with open(os.path.join(sysfs_root, "devices/system/cpu/online"), encoding="ascii") as fh:
            return parse_cpu_list(fh.read())
    except OSError:
        return list(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return cpus
