"""Canonical counter names: the one mapping from perf spellings to the names in NodeState.counters.

Consumers (the features service, training) read ``NodeState.counters`` by the names
below; ``NodeState.supported_events`` keeps the spellings the node itself used. The canonical
names are listed once, in ``featurelib/node/counters.py`` (re-exported here); this module
holds the rules that map perf's spellings onto them.

Rules, applied by :func:`parse_event`:

* Generic perf events keep perf's canonical spelling (``cycles``, ``instructions``,
  ``cache-references``, ``cache-misses``, ``branch-instructions``, ``branch-misses``,
  ``stalled-cycles-frontend``, ``stalled-cycles-backend``, ``ref-cycles``, ``bus-cycles``,
  ``LLC-loads``, ``LLC-load-misses``, ``LLC-stores``, ``LLC-store-misses``) and perf's
  aliases map onto them (``cpu-cycles`` → ``cycles``, ``branches`` → ``branch-instructions``,
  ``idle-cycles-frontend`` → ``stalled-cycles-frontend``, ``cs`` → ``context-switches``, …).
* Core-PMU prefixes are dropped, so hybrid spellings meet on one name:
  ``cpu_core/cpu-cycles/`` and ``cpu_atom/cpu-cycles/`` are both ``cycles``.
* Privilege modifiers are kept as a suffix when they restrict counting:
  ``cpu_core/cpu-cycles:u/`` → ``cycles:u``, ``instructions:k`` → ``instructions:k``;
  ``:uk`` (everything) and precision modifiers (``:p``, ``:pp``) are dropped.
* Raw codes stay raw, lower-cased: ``cpu_core/r0280:u/`` → ``r0280:u``.
* Events of other PMUs (uncore, msr, …) keep their PMU: ``msr/tsc/`` → ``msr/tsc``.
* Software events are canonical perf names: ``task-clock``, ``cpu-clock`` (both in
  **nanoseconds**, also when perf printed msec), ``context-switches``, ``cpu-migrations``,
  ``page-faults``, ``minor-faults``, ``major-faults``.
* ``mem-bandwidth-bytes``: DRAM traffic in bytes during the interval (reads + writes;
  from uncore IMC CAS counts × 64 on live Intel nodes, modelled by the simulator).
* CPU frequency is never a counter: it travels in ``NodeState.cpu_freq_mhz`` and is
  excluded from regime features (a utilisation confound).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from featurelib.node.counters import CACHE_EVENTS as CACHE_EVENTS
from featurelib.node.counters import CANONICAL_EVENTS as CANONICAL_EVENTS
from featurelib.node.counters import HARDWARE_EVENTS as HARDWARE_EVENTS
from featurelib.node.counters import MEM_BANDWIDTH_BYTES as MEM_BANDWIDTH_BYTES

EXCLUDED_FROM_REGIME_FEATURES: Final = frozenset({"cpu_freq_mhz"})
"""NodeState fields recorded for operators only (documented here for the features service)."""

ALIASES: Final[Mapping[str, str]] = {
    "cpu-cycles": "cycles",
    "branches": "branch-instructions",
    "idle-cycles-frontend": "stalled-cycles-frontend",
    "idle-cycles-backend": "stalled-cycles-backend",
    "cs": "context-switches",
    "migrations": "cpu-migrations",
    "faults": "page-faults",
    "llc-loads": "LLC-loads",
    "llc-load-misses": "LLC-load-misses",
    "llc-stores": "LLC-stores",
    "llc-store-misses": "LLC-store-misses",
}
_BY_LOWER: Final[Mapping[str, str]] = {name.lower(): name for name in CANONICAL_EVENTS}
CORE_PMU_RE: Final = re.compile(r"^(cpu|cpu_core|cpu_atom|cpu_lowpower|armv\d+_\w+|arm_\w+)$")
_RAW_RE: Final = re.compile(r"^r[0-9a-fA-F]{1,16}$")
_PMU_FORM_RE: Final = re.compile(r"^(?P<pmu>[A-Za-z0-9_.-]+)/(?P<term>[^/]+)/(?P<mods>[A-Za-z]*)$")
_PRIVILEGE = "ukh"


class EventNameError(ValueError):
    """A string that is not an event spelling perf could have printed."""


@dataclass(frozen=True)
class EventName:
    """One parsed event spelling."""

    original: str
    pmu: str | None
    base: str
    modifiers: str
    is_raw: bool

    @property
    def canonical(self) -> str:
        return f"{self.base}:{self.modifiers}" if self.modifiers else self.base


def _privilege(mods: str) -> str:
    kept = "".join(c for c in _PRIVILEGE if c in mods)
    # u+k (with or without h) counts everything the event can count: no restriction.
    return "" if ("u" in kept and "k" in kept) else kept


def _canonical_base(term: str) -> tuple[str, bool]:
    if _RAW_RE.match(term):
        return term.lower(), True
    lowered = term.lower()
    if lowered in ALIASES:
        return ALIASES[lowered], False
    if lowered in _BY_LOWER:
        return _BY_LOWER[lowered], False
    return term, False


def parse_event(spelling: str) -> EventName:
    """Parse ``cycles``, ``cycles:u``, ``cpu_core/cpu-cycles:u/``, ``cpu/cycles/u`` or ``r0280``."""
    text = spelling.strip()
    if not text or any(c.isspace() for c in text):
        raise EventNameError(f"not an event name: {spelling!r}")
    pmu: str | None = None
    mods = ""
    match = _PMU_FORM_RE.match(text)
    if match:
        pmu, term, mods = match["pmu"], match["term"], match["mods"]
        if ":" in term and "=" not in term.rsplit(":", 1)[1]:
            term, inner = term.rsplit(":", 1)
            mods += inner
    elif "/" in text:
        raise EventNameError(f"not an event name: {spelling!r}")
    else:
        term = text
        if ":" in term:
            term, mods = term.rsplit(":", 1)
    if not term or (mods and not mods.isalpha()):
        raise EventNameError(f"not an event name: {spelling!r}")
    privilege = _privilege(mods)
    if pmu is not None and not CORE_PMU_RE.match(pmu):
        return EventName(text, pmu, f"{pmu}/{term}", privilege, _RAW_RE.match(term) is not None)
    if "=" in term:  # config terms (event=0x3c,umask=0x1): nothing canonical to say
        name = f"{pmu}/{term}" if pmu else term
        return EventName(text, pmu, name, privilege, True)
    base, is_raw = _canonical_base(term)
    return EventName(text, pmu, base, privilege, is_raw)


def canonical_name(spelling: str) -> str:
    """The NodeState.counters key for an event spelling (see module docstring)."""
    return parse_event(spelling).canonical


def add_privilege_totals(counters: MutableMapping[str, dict[str, Any]]) -> list[str]:
    """Add ``X`` = ``X:u`` + ``X:k`` where both halves were counted and ``X`` is absent.

    The total is a sum of two measured counts, never an estimate of a missing one:
    its ``running_ns`` is the smaller of the two halves (the less-observed half
    bounds how much of the total was really counted) and ``raw`` is summed only
    when both halves carry one. Returns the names added.
    """
    added = []
    for name in sorted(counters):
        if not name.endswith(":u"):
            continue
        base = name[:-2]
        user, kernel = counters[name], counters.get(base + ":k")
        if kernel is None or base in counters:
            continue
        if user.get("value") is None or kernel.get("value") is None:
            continue
        multiplexed = "multiplexed" in (user.get("status"), kernel.get("status"))
        raw_u, raw_k = user.get("raw"), kernel.get("raw")
        enabled = max(int(user.get("enabled_ns", 0)), int(kernel.get("enabled_ns", 0)))
        running = min(int(user.get("running_ns", 0)), int(kernel.get("running_ns", 0)))
        counters[base] = {
            "raw": None if raw_u is None or raw_k is None else float(raw_u) + float(raw_k),
            "value": float(user["value"]) + float(kernel["value"]),
            "enabled_ns": enabled,
            "running_ns": min(running, enabled),
            "status": "multiplexed" if multiplexed else "counted",
        }
        added.append(base)
    return added
