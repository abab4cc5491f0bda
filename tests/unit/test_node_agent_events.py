"""The one canonical-name mapping (services/node_agent/events.py)."""

from __future__ import annotations

from typing import Any

import pytest

from services.node_agent.events import (
    CANONICAL_EVENTS,
    EventNameError,
    add_privilege_totals,
    canonical_name,
    parse_event,
)
from simulator import EVENTS


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("cycles", "cycles"),
        ("cpu-cycles", "cycles"),
        ("cpu_core/cpu-cycles:u/", "cycles:u"),
        ("cpu_core/cpu-cycles:k/", "cycles:k"),
        ("cpu_atom/cpu-cycles/", "cycles"),
        ("cpu/cycles/u", "cycles:u"),
        ("cpu_core/instructions:uk/", "instructions"),
        ("instructions:pp", "instructions"),
        ("branches", "branch-instructions"),
        ("idle-cycles-frontend", "stalled-cycles-frontend"),
        ("llc-load-misses", "LLC-load-misses"),
        ("LLC-loads", "LLC-loads"),
        ("cs", "context-switches"),
        ("faults", "page-faults"),
        ("task-clock", "task-clock"),
        ("cpu_core/r0280:u/", "r0280:u"),
        ("r0E11", "r0e11"),
        ("cpu_atom/r2724:k/", "r2724:k"),
        ("msr/tsc/", "msr/tsc"),
        ("uncore_imc_0/cas_count_read/", "uncore_imc_0/cas_count_read"),
        ("cpu/event=0x3c,umask=0x00/", "cpu/event=0x3c,umask=0x00"),
        ("mem_load_retired.l3_miss", "mem_load_retired.l3_miss"),
    ],
)
def test_canonical_names(spelling: str, canonical: str) -> None:
    assert canonical_name(spelling) == canonical


def test_hybrid_spellings_meet_on_one_name_and_keep_the_original() -> None:
    core, atom = parse_event("cpu_core/cpu-cycles:u/"), parse_event("cpu_atom/cpu-cycles:u/")
    assert core.canonical == atom.canonical == "cycles:u"
    assert (core.pmu, atom.pmu) == ("cpu_core", "cpu_atom")
    assert core.original == "cpu_core/cpu-cycles:u/"
    assert parse_event("cpu_core/r0280:u/").is_raw


@pytest.mark.parametrize("bad", ["", "two words", "cpu/cycles", "cycles:1", "/x/"])
def test_bad_spellings_are_rejected(bad: str) -> None:
    with pytest.raises(EventNameError):
        parse_event(bad)


def test_simulator_uses_canonical_names() -> None:
    assert set(EVENTS) <= CANONICAL_EVENTS


def test_privilege_totals_sum_measured_halves_only() -> None:
    counters: dict[str, dict[str, Any]] = {
        "cycles:u": {"raw": None, "value": 10.0, "enabled_ns": 100, "running_ns": 30, "status": "multiplexed"},
        "cycles:k": {"raw": None, "value": 5.0, "enabled_ns": 100, "running_ns": 40, "status": "multiplexed"},
        "r0280:u": {"raw": 1.0, "value": 1.0, "enabled_ns": 100, "running_ns": 100, "status": "counted"},
        "r0280:k": {"raw": None, "value": None, "enabled_ns": 100, "running_ns": 0, "status": "not_counted"},
    }
    assert add_privilege_totals(counters) == ["cycles"]
    total = counters["cycles"]
    assert total["value"] == 15.0
    assert total["running_ns"] == 30
    assert total["status"] == "multiplexed"
    assert "r0280" not in counters  # half of it was not counted: no total is invented
