"""featurelib.borg_units: Kubernetes requests, priorities and QoS on the Borg 2011 scale, hand-computed."""

from __future__ import annotations

import itertools
import math

import pytest

from featurelib.borg_units import (
    PRIORITY_BANDS,
    QOS_CLASSES,
    LargestNode,
    UnplaceableError,
    borg_priority,
    normalised_request,
    scheduling_class,
    task_units,
)

NODE = LargestNode(cpu_cores=8.0, memory_gib=32.0)


@pytest.mark.parametrize(("amount", "largest", "want"), [
    (2.0, 8.0, 0.25), (0.0, 8.0, 0.0), (8.0, 8.0, 1.0), (0.25, 0.5, 0.5), (None, 8.0, None), (None, None, None),
])
def test_requests_are_divided_by_the_largest_node(amount: float | None, largest: float | None,
                                                  want: float | None) -> None:
    assert normalised_request(amount, largest) == want


@pytest.mark.parametrize(("amount", "largest", "why"), [
    (9.0, 8.0, "larger than the largest node"),
    (1.0, None, "not known"),
    (1.0, 0.0, "not known"),
    (1.0, math.inf, "not known"),
    (-1.0, 8.0, "non-negative"),
    (math.nan, 8.0, "non-negative"),
])
def test_requests_the_mapping_cannot_place_are_refused(amount: float, largest: float | None, why: str) -> None:
    with pytest.raises(UnplaceableError, match=why):
        normalised_request(amount, largest)


@pytest.mark.parametrize(("k8s", "borg"), [
    (-(2**31), 0), (-1, 0), (0, 2), (1, 8), (1_000, 8), (999_999, 8), (1_000_000, 9), (1_000_000_000, 9),
    (2_000_000_000, 11), (2_000_001_000, 11), (None, None),
])
def test_priority_bands(k8s: int | None, borg: int | None) -> None:
    assert borg_priority(k8s) == borg


@pytest.mark.parametrize("k8s", [1_000_000_001, 1_500_000_000, 1_999_999_999, 2_000_001_001, 3_000_000_000,
                                 -(2**31) - 1])
def test_priorities_no_priority_class_can_carry_are_refused(k8s: int) -> None:
    with pytest.raises(UnplaceableError, match="no Kubernetes priority range"):
        borg_priority(k8s)


def test_the_band_table_keeps_the_order_and_uses_borg_values() -> None:
    for (lo, hi, borg, _), (nlo, _, nborg, _) in itertools.pairwise(PRIORITY_BANDS):
        assert lo <= hi < nlo and borg < nborg
    assert all(0 <= borg <= 11 for *_, borg, _ in PRIORITY_BANDS)


@pytest.mark.parametrize(("qos", "prio", "want"), [
    ("BestEffort", 2, 0), ("Burstable", 2, 1), ("Burstable", 11, 1), ("Guaranteed", 2, 2), ("Guaranteed", 8, 2),
    ("Guaranteed", 9, 3), ("Guaranteed", 11, 3), ("Guaranteed", None, 2), (None, 9, None),
])
def test_qos_to_scheduling_class(qos: str | None, prio: int | None, want: int | None) -> None:
    assert scheduling_class(qos, prio) == want


def test_an_unknown_qos_class_is_refused() -> None:
    assert set(QOS_CLASSES) == {"BestEffort", "Burstable", "Guaranteed"}
    with pytest.raises(UnplaceableError, match="QoS"):
        scheduling_class("Platinum", 9)


def test_kubernetes_event_on_the_borg_scale() -> None:
    u = task_units(source="kubernetes", cpu_request=2.0, memory_request=4.0, disk_request=None, priority=0,
                   scheduling_class=1, largest=NODE)
    assert (u.cpu_request, u.memory_request, u.disk_request, u.priority, u.scheduling_class) == (0.25, 0.125, None,
                                                                                                  2, 1)
    assert u.unmapped == frozenset()


def test_kubernetes_fields_that_cannot_be_placed_are_unknown_and_named() -> None:
    huge = task_units(source="kubernetes", cpu_request=64.0, memory_request=4.0, disk_request=None,
                      priority=3_000_000_000, scheduling_class=2, largest=NODE)
    assert (huge.cpu_request, huge.memory_request, huge.priority) == (None, 0.125, None)
    assert huge.unmapped == {"cpu_request:unmapped", "priority:unmapped"}
    blind = task_units(source="kubernetes", cpu_request=1.0, memory_request=1.0, disk_request=3.0, priority=5,
                       scheduling_class=None, largest=LargestNode())
    assert (blind.cpu_request, blind.memory_request, blind.disk_request, blind.priority) == (None, None, None, 8)
    assert blind.unmapped == {"cpu_request:unmapped", "memory_request:unmapped", "disk_request:unmapped"}


def test_trace_sources_are_identity_and_2019_priorities_are_refused() -> None:
    for source in ("google2011", "synthetic"):
        u = task_units(source=source, cpu_request=0.5, memory_request=0.7, disk_request=0.01, priority=9,
                       scheduling_class=3, largest=LargestNode())
        assert (u.cpu_request, u.memory_request, u.disk_request, u.priority, u.scheduling_class, u.unmapped) == (
            0.5, 0.7, 0.01, 9, 3, frozenset())
    g19 = task_units(source="google2019", cpu_request=0.5, memory_request=0.7, disk_request=None, priority=200,
                     scheduling_class=3, largest=NODE)
    assert (g19.cpu_request, g19.priority, g19.unmapped) == (0.5, None, frozenset({"priority:unmapped"}))
