"""Live sampling of this node: perf_event counters (system-wide and per cgroup) plus /proc utilisation.

Each configured event is opened once per online CPU (``pid=-1``: every task on that
CPU). A sample is the delta since the previous one, aggregated over CPUs the way
``perf stat -a`` does: ``raw`` = Σ counts, ``enabled_ns`` = Σ time enabled,
``running_ns`` = Σ time running, ``value`` = raw × enabled / running (scaled for
multiplexing). Status: ``not_supported`` when the event could not be opened,
``not_counted`` when it never ran in the interval, ``multiplexed`` when it ran for
part of it. Numbers are never invented.

When the node exposes no hardware PMU (typical for VMs) only software events open:
the sampler says so once, at start, and carries on (``pmu="software"``).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from featurelib.pod import EXTENDED_EVENTS, NODE_LLC_BYTES, NODE_MEMBW_PEAK, pod_uid_of
from services.node_agent import discovery
from services.node_agent import perf_event as pe
from services.node_agent.events import CACHE_EVENTS, HARDWARE_EVENTS, MEM_BANDWIDTH_BYTES, canonical_name
from services.node_agent.nodestate import CounterDict, counted, without_number
from services.node_agent.procfs import CpuUtil, cpu_freq_mhz, mem_util
from services.node_agent.resctrl import ResctrlMonitor, ResctrlUnavailableError, llc_bytes

log = logging.getLogger(__name__)

DEFAULT_EVENTS: Final = (
    *(e for e in HARDWARE_EVENTS if e != "bus-cycles"),
    *CACHE_EVENTS[:2],
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
)
DEFAULT_CGROUP_EVENTS: Final = EXTENDED_EVENTS
"""What the ``pod-pressure`` stage reads from a pod's cgroup (fewer and every pod is ``unknown`` there)."""


@dataclass
class _Open:
    spelling: str
    canonical: str
    spec: pe.EventSpec
    fds: list[int]
    last: list[tuple[int, int, int]]


@dataclass
class LiveSample:
    counters: dict[str, CounterDict]
    supported_events: list[str]
    cpu_util: float
    mem_util: float
    cpu_freq_mhz: float | None
    cgroups: dict[str, dict[str, CounterDict]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _open_on_cpus(spec: pe.EventSpec, cpus: Sequence[int], cgroup_fd: int | None = None) -> list[int]:
    """Open on every CPU; the first failure on the first CPU means the event is unusable."""
    fds: list[int] = []
    for cpu in spec.cpus or cpus:
        try:
            fds.append(pe.open_counter(spec, cpu=cpu, cgroup_fd=cgroup_fd))
        except pe.PerfEventError:
            if not fds:
                raise
            # A CPU went offline between discovery and open: count on the others.
    return fds


def _aggregate(events: Sequence[_Open]) -> CounterDict:
    raw = enabled = running = 0
    scale = 1.0
    for ev in events:
        scale = ev.spec.scale
        for i, fd in enumerate(ev.fds):
            current = pe.read_counter(fd)
            last = ev.last[i]
            raw += current[0] - last[0]
            enabled += current[1] - last[1]
            running += current[2] - last[2]
            ev.last[i] = current
    if enabled <= 0 or running <= 0:
        return without_number("not_counted", enabled_ns=max(enabled, 0))
    value = raw * (enabled / running) * scale if running < enabled else raw * scale
    return counted(float(value), enabled_ns=enabled, running_ns=running, raw=float(raw))


class _CounterSet:
    """Opened events grouped by canonical name (hybrid PMUs and per-CPU fds are summed)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[_Open]] = {}
        self.missing: dict[str, str] = {}

    def open(
        self, spelling: str, pmus: dict[str, discovery.Pmu], cpus: Sequence[int], cgroup_fd: int | None = None
    ) -> bool:
        canonical = canonical_name(spelling)
        try:
            specs = discovery.resolve(spelling, pmus)
        except discovery.UnknownEventError as exc:
            self.missing[canonical] = str(exc)
            return False
        opened: list[_Open] = []
        reason = ""
        for spec in specs:
            try:
                fds = _open_on_cpus(spec, cpus, cgroup_fd)
            except pe.PerfEventError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                continue
            opened.append(_Open(spec.name, canonical, spec, fds, [pe.read_counter(fd) for fd in fds]))
        if not opened:
            self.missing[canonical] = reason or "cannot be opened"
            return False
        self.groups.setdefault(canonical, []).extend(opened)
        return True

    def read(self) -> dict[str, CounterDict]:
        out = {name: _aggregate(events) for name, events in self.groups.items()}
        for name in self.missing:
            if name not in out:
                out[name] = without_number("not_supported")
        return out

    @property
    def spellings(self) -> list[str]:
        return [ev.spelling for events in self.groups.values() for ev in events]

    def close(self) -> None:
        for events in self.groups.values():
            for ev in events:
                _close_all(ev.fds)
        self.groups.clear()


class _Cgroups:
    """Per-cgroup counters: perf_event in cgroup mode (pid = cgroup dir fd, one fd per CPU)."""

    def __init__(self, root: str, depth: int, limit: int, events: Sequence[str], rescan_s: float) -> None:
        self.root, self.depth, self.limit, self.events, self.rescan_s = root, depth, limit, list(events), rescan_s
        self.sets: dict[str, tuple[int, _CounterSet]] = {}
        self._next_scan = 0.0
        self._warned = False

    def refresh(self, pmus: dict[str, discovery.Pmu], cpus: Sequence[int], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_scan:
            return
        self._next_scan = now + self.rescan_s
        wanted = discovery.cgroup_dirs(self.root, self.depth, self.limit)
        for gone in set(self.sets) - set(wanted):
            dir_fd, cset = self.sets.pop(gone)
            cset.close()
            _close_all([dir_fd])
        for rel in wanted:
            if rel in self.sets:
                continue
            try:
                dir_fd = os.open(os.path.join(self.root, rel), os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            cset = _CounterSet()
            for name in self.events:
                cset.open(name, pmus, cpus, cgroup_fd=dir_fd)
            if not cset.groups and not self._warned:
                self._warned = True
                reasons = "; ".join(f"{k}: {v}" for k, v in cset.missing.items())
                log.warning("per-cgroup counting unavailable under %s (%s)", self.root, reasons)
            self.sets[rel] = (dir_fd, cset)

    def read(self) -> dict[str, dict[str, CounterDict]]:
        out = {}
        for rel, (_fd, cset) in self.sets.items():
            try:
                out[rel] = cset.read()
            except OSError:
                continue
        return out

    def close(self) -> None:
        for dir_fd, cset in self.sets.values():
            cset.close()
            _close_all([dir_fd])
        self.sets.clear()


class LiveSampler:
    """Samples this node; ``open()`` once, ``sample()`` every interval, ``close()`` at the end."""

    def __init__(
        self,
        *,
        events: Sequence[str] = DEFAULT_EVENTS,
        raw_events: Sequence[str] = (),
        sysfs_root: str = "/sys",
        proc_root: str = "/proc",
        cgroup_root: str | None = None,
        cgroup_depth: int = 2,
        cgroup_max: int = 64,
        cgroup_events: Sequence[str] = DEFAULT_CGROUP_EVENTS,
        cgroup_rescan_s: float = 10.0,
        record_freq: bool = True,
        resctrl_root: str | None = None,
        membw_peak_bytes_per_s: float | None = None,
    ) -> None:
        self.events = list(dict.fromkeys([*events, *raw_events]))
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self.record_freq = record_freq
        self.pmus: dict[str, discovery.Pmu] = {}
        self.cpus: list[int] = []
        self.counters = _CounterSet()
        self.pmu = "software"
        self.source = "software"
        self._cgroup_spec = (cgroup_root, cgroup_depth, cgroup_max, tuple(cgroup_events), cgroup_rescan_s)
        self.cgroups: _Cgroups | None = None
        self._util: CpuUtil | None = None
        self.has_imc = False
        self.resctrl_root = resctrl_root
        self.resctrl: ResctrlMonitor | None = None
        self.node_metrics: dict[str, float] = {}
        if membw_peak_bytes_per_s is not None:
            self.node_metrics[NODE_MEMBW_PEAK] = membw_peak_bytes_per_s
        self._last_sample: float | None = None

    def open(self) -> None:
        self.pmus = discovery.discover(self.sysfs_root)
        self.cpus = pe.online_cpus(self.sysfs_root)
        log.info(
            "PMUs in sysfs: %s",
            ", ".join(f"{p.name} (type {p.type}, {len(p.events)} named events)" for p in self.pmus.values()) or "none",
        )
        wanted = list(self.events)
        imc = discovery.imc_bandwidth_events(self.pmus)
        self.has_imc = bool(imc)
        if pe.available():
            for name in wanted + imc:
                self.counters.open(name, self.pmus, self.cpus)
        else:
            for name in wanted:
                self.counters.missing[canonical_name(name)] = "perf_event_open not available on this platform"
        hardware = [e for e in self.counters.groups if e in HARDWARE_EVENTS or e in CACHE_EVENTS or e.startswith("r")]
        software = sorted(self.counters.groups)
        if hardware:
            self.pmu, self.source = "hardware", "perf_event"
            log.info("perf_event: counting %s on %d CPUs", ", ".join(software), len(self.cpus))
        else:
            reason = (
                "no hardware PMU in sysfs"
                if not discovery.has_hardware_pmu(self.pmus)
                else "hardware events cannot be opened"
            )
            log.warning(
                "no hardware PMU available on this node (%s; hypervisors often expose none): running on software "
                "events only (%s); hardware counters are reported as not_supported",
                reason,
                ", ".join(software) or "none — utilisation from /proc only",
            )
        denied = {
            k: v
            for k, v in self.counters.missing.items()
            if v == os.strerror(errno.EACCES) or v == os.strerror(errno.EPERM)
        }
        if denied:
            log.warning(
                "perf_event_open denied for %s (needs root/CAP_PERFMON or perf_event_paranoid <= 0)", ", ".join(denied)
            )
        root, depth, limit, cg_events, rescan = self._cgroup_spec
        if root:
            usable = [e for e in cg_events if canonical_name(e) in self.counters.groups]
            self.cgroups = _Cgroups(root, depth, limit, usable, rescan)
            self.cgroups.refresh(self.pmus, self.cpus, force=True)
            self._open_resctrl(root)
        self._util = CpuUtil(self.proc_root)

    def _open_resctrl(self, cgroup_root: str) -> None:
        if not self.resctrl_root:
            return
        try:
            self.resctrl = ResctrlMonitor(self.resctrl_root, cgroup_root)
        except ResctrlUnavailableError as exc:
            log.warning("per-pod LLC occupancy / memory traffic off: %s", exc)
            return
        size = llc_bytes(self.sysfs_root)
        if size is not None:
            self.node_metrics[NODE_LLC_BYTES] = float(size)
        log.info("resctrl: monitoring %s per pod under %s (LLC %s bytes)", ", ".join(self.resctrl.events),
                 self.resctrl_root, size if size is not None else "unknown")

    def sample(self) -> LiveSample:
        counters = self.counters.read()
        if self.has_imc:
            counters[MEM_BANDWIDTH_BYTES] = self._bandwidth(counters)
        elif MEM_BANDWIDTH_BYTES not in counters:
            counters[MEM_BANDWIDTH_BYTES] = without_number("not_supported")
        cgroups: dict[str, dict[str, CounterDict]] = {}
        if self.cgroups is not None:
            self.cgroups.refresh(self.pmus, self.cpus)
            cgroups = self.cgroups.read()
        now = time.monotonic()
        if self.resctrl is not None and self.cgroups is not None:
            # pods only: a CPU has a few hundred monitoring ids, and the pod-pressure stage reads pods only
            self.resctrl.sync(rel for rel in self.cgroups.sets if pod_uid_of(rel) is not None)
            interval_ns = round((now - self._last_sample) * 1e9) if self._last_sample is not None else 0
            for rel, readings in self.resctrl.read(interval_ns).items():
                cgroups.setdefault(rel, {}).update(readings)
        self._last_sample = now
        util = self._util.sample() if self._util is not None else None
        return LiveSample(
            counters=counters,
            supported_events=self.counters.spellings,
            cpu_util=util if util is not None else 0.0,
            mem_util=mem_util(self.proc_root) or 0.0,
            cpu_freq_mhz=cpu_freq_mhz(self.sysfs_root, self.proc_root) if self.record_freq else None,
            cgroups=cgroups,
            metrics=dict(self.node_metrics) if self.resctrl is not None else {},
        )

    def _bandwidth(self, counters: dict[str, CounterDict]) -> CounterDict:
        parts = [c for name, c in counters.items() if discovery.IMC_RE.match(name.split("/", 1)[0])]
        if not parts or any(c["value"] is None for c in parts):
            return without_number("not_counted")
        enabled = max(c["enabled_ns"] for c in parts)
        running = min(c["running_ns"] for c in parts)
        return counted(float(sum(c["value"] for c in parts)), enabled_ns=enabled, running_ns=running)

    def close(self) -> None:
        self.counters.close()
        if self.cgroups is not None:
            self.cgroups.close()
        if self.resctrl is not None:
            self.resctrl.close()
