"""Which PMUs and events this node has (sysfs ``event_source``), and how to open an event by name.

``/sys/bus/event_source/devices/<pmu>/`` holds ``type`` (the perf_event_attr.type), ``events/``
(named events, e.g. ``event=0x3c``; ``<name>.scale`` / ``<name>.unit`` for scaled ones),
``format/`` (which config bits each term occupies, e.g. ``config:0-7``) and ``cpus`` /
``cpumask``. Event names resolve to :class:`EventSpec` here:

* generic hardware / cache / software names (``cycles``, ``LLC-loads``, ``task-clock``);
  on hybrid machines one spec per core PMU (``cpu_core/cycles/``, ``cpu_atom/cycles/``),
  using the extended type in config bits 32-63 and that PMU's CPUs;
* raw codes ``r0280`` (or ``cpu_core/r0280/``) → PERF_TYPE_RAW or the core PMU's type;
* ``pmu/term=value,.../`` and ``pmu/name/`` through the PMU's sysfs ``format``/``events``;
* privilege modifiers ``:u`` / ``:k`` → exclude_kernel / exclude_user.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from services.node_agent import perf_event as pe
from services.node_agent.events import CORE_PMU_RE, EventNameError, parse_event

DEVICES: Final = "bus/event_source/devices"
_RANGE_RE: Final = re.compile(r"^(config\d?):([\d,\-]+)$")
_UNIT_BYTES: Final = {"MiB": 1024.0 * 1024.0, "KiB": 1024.0, "GiB": 1024.0**3, "B": 1.0, "Bytes": 1.0}
IMC_RE: Final = re.compile(r"^uncore_imc(_\d+)?$")


class UnknownEventError(ValueError):
    """An event name this node cannot resolve (reported as not_supported, never invented)."""


@dataclass(frozen=True)
class Pmu:
    name: str
    type: int
    events: dict[str, str] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)
    formats: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    cpus: tuple[int, ...] | None = None

    @property
    def is_core(self) -> bool:
        return CORE_PMU_RE.match(self.name) is not None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _parse_format(text: str) -> tuple[str, tuple[tuple[int, int], ...]] | None:
    match = _RANGE_RE.match(text.strip())
    if not match:
        return None
    ranges = []
    for part in match[2].split(","):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi) if hi else int(lo)))
    return match[1], tuple(ranges)


def load_pmu(path: Path) -> Pmu | None:
    type_text = _read(path / "type")
    if type_text is None or not type_text.isdigit():
        return None
    events: dict[str, str] = {}
    scales: dict[str, float] = {}
    ev_dir = path / "events"
    if ev_dir.is_dir():
        for entry in sorted(ev_dir.iterdir()):
            if "." in entry.name:
                continue
            text = _read(entry)
            if text is None:
                continue
            events[entry.name] = text
            scale = _read(ev_dir / f"{entry.name}.scale")
            unit = _read(ev_dir / f"{entry.name}.unit")
            if scale:
                try:
                    scales[entry.name] = float(scale) * _UNIT_BYTES.get(unit or "", 1.0)
                except ValueError:
                    pass
    formats: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = {}
    fmt_dir = path / "format"
    if fmt_dir.is_dir():
        for entry in sorted(fmt_dir.iterdir()):
            text = _read(entry)
            parsed = _parse_format(text) if text else None
            if parsed:
                formats[entry.name] = parsed
    cpus_text = _read(path / "cpus") or _read(path / "cpumask")
    cpus = tuple(pe.parse_cpu_list(cpus_text)) if cpus_text else None
    return Pmu(path.name, int(type_text), events, scales, formats, cpus)


def discover(sysfs_root: str = "/sys") -> dict[str, Pmu]:
    """Every PMU under ``<sysfs>/bus/event_source/devices`` (empty when sysfs is absent)."""
    root = Path(sysfs_root) / DEVICES
    pmus: dict[str, Pmu] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return pmus
    for entry in entries:
        pmu = load_pmu(entry)
        if pmu is not None:
            pmus[pmu.name] = pmu
    return pmus


def core_pmus(pmus: dict[str, Pmu]) -> list[Pmu]:
    return [p for p in pmus.values() if p.is_core]


def has_hardware_pmu(pmus: dict[str, Pmu]) -> bool:
    """A core PMU is listed in sysfs (hypervisors that expose none leave only software/tracepoint)."""
    return bool(core_pmus(pmus))


def encode_terms(pmu: Pmu, terms: str) -> tuple[int, int, int]:
    """``event=0x3c,umask=0x1`` → (config, config1, config2) using the PMU's sysfs format."""
    configs = {"config": 0, "config1": 0, "config2": 0}
    for term in terms.split(","):
        term = term.strip()
        if not term:
            continue
        key, _, value_text = term.partition("=")
        key = key.strip()
        if key not in pmu.formats:
            raise UnknownEventError(f"{pmu.name}: unknown term {key!r} (format has {sorted(pmu.formats)})")
        value = int(value_text, 0) if value_text else 1
        target, ranges = pmu.formats[key]
        shift = 0
        for lo, hi in ranges:
            width = hi - lo + 1
            configs[target] |= ((value >> shift) & ((1 << width) - 1)) << lo
            shift += width
    return configs["config"], configs["config1"], configs["config2"]


def _generic(name: str) -> tuple[int, int] | None:
    if name in pe.HW_CONFIG:
        return pe.TYPE_HARDWARE, pe.HW_CONFIG[name]
    if name in pe.CACHE_CONFIG:
        return pe.TYPE_HW_CACHE, pe.CACHE_CONFIG[name]
    if name in pe.SW_CONFIG:
        return pe.TYPE_SOFTWARE, pe.SW_CONFIG[name]
    return None


def resolve(spelling: str, pmus: dict[str, Pmu]) -> list[pe.EventSpec]:
    """Specs to open for one configured event name (several on hybrid machines)."""
    try:
        parsed = parse_event(spelling)
    except EventNameError as exc:
        raise UnknownEventError(str(exc)) from None
    excl_user = parsed.modifiers == "k"
    excl_kernel = parsed.modifiers == "u"
    term = parsed.original
    if parsed.pmu is not None:
        term = parsed.original.split("/", 2)[1].split(":")[0]
    if parsed.pmu is None:
        generic = _generic(parsed.base)
        cores = core_pmus(pmus)
        if generic is not None:
            gtype, config = generic
            if gtype != pe.TYPE_SOFTWARE and len(cores) > 1:  # hybrid: one per core PMU, extended type
                return [
                    pe.EventSpec(
                        f"{p.name}/{spelling}/",
                        gtype,
                        config | (p.type << 32),
                        exclude_user=excl_user,
                        exclude_kernel=excl_kernel,
                        cpus=p.cpus,
                    )
                    for p in cores
                ]
            return [pe.EventSpec(spelling, gtype, config, exclude_user=excl_user, exclude_kernel=excl_kernel)]
        if parsed.is_raw and parsed.base.startswith("r"):
            code = int(parsed.base[1:], 16)
            if len(cores) > 1:
                return [
                    pe.EventSpec(
                        f"{p.name}/{spelling}/",
                        p.type,
                        code,
                        exclude_user=excl_user,
                        exclude_kernel=excl_kernel,
                        cpus=p.cpus,
                    )
                    for p in cores
                ]
            return [pe.EventSpec(spelling, pe.TYPE_RAW, code, exclude_user=excl_user, exclude_kernel=excl_kernel)]
        raise UnknownEventError(f"unknown event {spelling!r}")
    pmu = pmus.get(parsed.pmu)
    if pmu is None:
        raise UnknownEventError(f"PMU {parsed.pmu!r} not present on this node")
    scale = 1.0
    if re.fullmatch(r"r[0-9a-fA-F]+", term):
        config, config1, config2 = int(term[1:], 16), 0, 0
    elif "=" in term:
        config, config1, config2 = encode_terms(pmu, term)
    elif term in pmu.events:
        config, config1, config2 = encode_terms(pmu, pmu.events[term])
        scale = pmu.scales.get(term, 1.0)
    elif pmu.is_core and _generic(parse_event(term).base) is not None:
        gtype, gconfig = _generic(parse_event(term).base) or (0, 0)
        return [
            pe.EventSpec(
                spelling,
                gtype,
                gconfig | (pmu.type << 32),
                exclude_user=excl_user,
                exclude_kernel=excl_kernel,
                cpus=pmu.cpus,
            )
        ]
    else:
        raise UnknownEventError(f"{pmu.name} has no event {term!r}")
    return [
        pe.EventSpec(
            spelling,
            pmu.type,
            config,
            config1,
            config2,
            exclude_user=excl_user,
            exclude_kernel=excl_kernel,
            scale=scale,
            cpus=pmu.cpus,
        )
    ]


def imc_bandwidth_events(pmus: dict[str, Pmu]) -> list[str]:
    """``uncore_imc_N/cas_count_read/`` and ``…_write/`` of every IMC that has them (Intel servers)."""
    names: list[str] = []
    for pmu in pmus.values():
        if IMC_RE.match(pmu.name):
            names.extend(f"{pmu.name}/{ev}/" for ev in ("cas_count_read", "cas_count_write") if ev in pmu.events)
    return names


def list_supported(pmus: dict[str, Pmu]) -> list[str]:
    """A catalogue of named events this node lists in sysfs (``pmu/event/``), for operators."""
    return [f"{p.name}/{ev}/" for p in pmus.values() for ev in p.events]


def cgroup_dirs(root: str, depth: int, limit: int) -> list[str]:
    """Cgroup directories under ``root`` down to ``depth`` levels (relative paths, sorted, at most ``limit``)."""
    found: list[str] = []
    base = os.path.abspath(root)
    for current, dirs, _files in os.walk(base):
        rel = os.path.relpath(current, base)
        level = 0 if rel == "." else rel.count(os.sep) + 1
        if level >= depth:
            dirs[:] = []
        dirs.sort()
        if level > 0:
            found.append(rel)
    found.sort()
    return found[:limit]
