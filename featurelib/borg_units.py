"""Kubernetes pod → the Borg 2011 feature scale the failure model was trained on: the ONE mapping.

The Google 2011 trace (schema v2.1, ``/work/shared/data/google2011``) does not record cores,
bytes or Kubernetes priorities. Its task requests are *normalised*: each resource is divided
by the capacity of the largest machine in the cluster for that resource, so they lie in
0..1. Its priorities are 12 ordered values 0..11, and its scheduling class 0..3 says how
latency-sensitive a task is (3 most). A model trained on those numbers must be fed the
same scale; this module is the only place that converts, and it refuses (``UnplaceableError``)
instead of inventing a value when it cannot.

Requests (``normalised_request``): ``request / largest``, where ``largest`` is the biggest
*allocatable* of that resource over the cluster's nodes (allocatable, not capacity: what
pods can be given, as Borg's normalisation is by what the largest machine offers). CPU and
memory are normalised separately, as the trace does. Refused: no largest node known yet, a
request larger than the largest node (no machine of the cluster could hold it: the trace
has none such), negative or non-finite values.

Priorities (``borg_priority``, table ``PRIORITY_BANDS``): the trace's documentation names
three bands — *free* (the lowest priorities, little internal charging), *production* (the
highest, which the scheduler protects from eviction) and *monitoring*; between them lies
the batch / best-effort middle. In parts 00–09 the values used are 0, 1 (free), 2, 8
(middle), 9, 10 (production) and 11 (monitoring, all of it scheduling class 2); of the
675,721 SUBMIT events there, 41 % are priority 0, 9 % 1, 40 % 2, 1 % 8, 8 % 9, 0.2 % 10
and 1 % 11. Kubernetes priorities are int32 values of PriorityClasses: 0 when a pod names
none, user classes at most 1,000,000,000, and the two system classes at 2,000,000,000
(system-cluster-critical) and 2,000,001,000 (system-node-critical). The table maps each range onto a value the
trace actually uses, keeping the order:

==============================  =====  ===========  ==========================================
Kubernetes priority             Borg   trace band   why
==============================  =====  ===========  ==========================================
< 0                             0      free         below the default: every default pod
                                                    preempts it, like Borg's free tier
0 (no PriorityClass)            2      middle       ordinary, charged work: the lowest
                                                    non-free value, the commonest non-free
1 .. 999,999                    8      middle       above the default but not "high": the
                                                    upper of the two middle values in use
1,000,000 .. 1,000,000,000      9      production   1,000,000 is the Kubernetes docs' own
                                                    "high-priority" class value
2,000,000,000 .. 2,000,001,000  11     monitoring   the system classes: the cluster's own
                                                    agents, evicted last (Borg's top value)
anything else                   —      refused      no PriorityClass can carry it (the API
                                                    reserves > 1e9 for the two system ones)
==============================  =====  ===========  ==========================================

Scheduling class (``scheduling_class``, table ``QOS_CLASSES``): Kubernetes has no latency
class, its QoS class is the nearest signal. BestEffort → 0, Burstable → 1, Guaranteed → 2,
Guaranteed at a production-or-higher Borg priority (≥ 9) → 3. Over the SUBMIT events of
parts 00–09, 99 % of class-0 tasks are priority 0–2 and 84 % of class-3 tasks priority 9–10,
so class 3 is kept for protected, fully reserved work. An unknown QoS string is refused.

Trace sources (``google2011``, ``synthetic``) are already on this scale: identity. The 2019
trace normalises requests the same way but its priorities are 0..450, so they are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

UNMAPPED_SUFFIX: Final = ":unmapped"
"""A field the mapping refused is reported as ``<field>:unmapped`` (e.g. ``cpu_request:unmapped``)."""

PRIORITY_BANDS: Final[tuple[tuple[int, int, int, str], ...]] = (
    # (lowest Kubernetes priority, highest, Borg priority, trace band); ranges are inclusive
    (-(2**31), -1, 0, "free"),
    (0, 0, 2, "middle"),
    (1, 999_999, 8, "middle"),
    (1_000_000, 1_000_000_000, 9, "production"),
    (2_000_000_000, 2_000_001_000, 11, "monitoring"),
)
BORG_PRODUCTION: Final = 9
"""Lowest Borg priority of the production band."""

QOS_CLASSES: Final[dict[str, int]] = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
"""Kubernetes QoS class → Borg scheduling class (3: Guaranteed at production priority)."""

IDENTITY_SOURCES: Final = frozenset({"google2011", "synthetic"})
"""Event sources whose requests, priorities and classes are already on the Borg 2011 scale."""


class UnplaceableError(ValueError):
    """A value the mapping cannot place on the Borg scale (never replaced by a guess)."""


def unmapped(field: str) -> str:
    return field + UNMAPPED_SUFFIX


@dataclass(frozen=True, slots=True)
class LargestNode:
    """Largest allocatable per resource over the cluster's nodes (None: not known)."""

    cpu_cores: float | None = None
    memory_gib: float | None = None


def normalised_request(amount: float | None, largest: float | None) -> float | None:
    """``amount / largest`` in 0..1; None when the amount is unknown; ``UnplaceableError`` when it cannot be placed."""
    if amount is None:
        return None
    if not math.isfinite(amount) or amount < 0:
        raise UnplaceableError(f"request {amount!r} is not a non-negative number")
    if largest is None or not math.isfinite(largest) or largest <= 0:
        raise UnplaceableError("the largest node's allocatable is not known")
    if amount > largest:
        raise UnplaceableError(f"request {amount:g} is larger than the largest node ({largest:g})")
    return amount / largest


def borg_priority(priority: int | None) -> int | None:
    """Kubernetes pod priority → Borg 2011 priority (``PRIORITY_BANDS``); None when unknown."""
    if priority is None:
        return None
    for lo, hi, borg, _band in PRIORITY_BANDS:
        if lo <= priority <= hi:
            return borg
    raise UnplaceableError(f"priority {priority} is in no Kubernetes priority range")


def scheduling_class(qos: str | None, borg_prio: int | None) -> int | None:
    """Kubernetes QoS class (and the Borg priority) → Borg scheduling class 0..3; None when unknown."""
    if qos is None:
        return None
    if qos not in QOS_CLASSES:
        raise UnplaceableError(f"QoS class {qos!r} is not one of {sorted(QOS_CLASSES)}")
    if qos == "Guaranteed" and borg_prio is not None and borg_prio >= BORG_PRODUCTION:
        return 3
    return QOS_CLASSES[qos]


@dataclass(frozen=True, slots=True)
class BorgTaskUnits:
    """A task's requests, priority and class on the Borg scale; ``unmapped`` names the refused fields."""

    cpu_request: float | None
    memory_request: float | None
    disk_request: float | None
    priority: int | None
    scheduling_class: int | None
    unmapped: frozenset[str] = frozenset()


def task_units(*, source: str, cpu_request: float | None, memory_request: float | None,
               disk_request: float | None, priority: int | None, scheduling_class: int | None,
               largest: LargestNode) -> BorgTaskUnits:
    """One task event's fields on the Borg scale. A refused field becomes None (unknown) and is named
    in ``unmapped``. Kubernetes events carry cores, GiB and the raw pod priority; their scheduling class
    is already Borg's (the watcher maps QoS with ``scheduling_class``). A disk request has no
    Kubernetes counterpart here, so one on a Kubernetes event is refused too."""
    if source in IDENTITY_SOURCES:
        return BorgTaskUnits(cpu_request, memory_request, disk_request, priority, scheduling_class)
    refused: set[str] = set()
    if source != "kubernetes":  # google2019: same request normalisation, another priority scale
        if priority is not None:
            refused.add(unmapped("priority"))
        return BorgTaskUnits(cpu_request, memory_request, disk_request, None, scheduling_class, frozenset(refused))
    cpu = _request("cpu_request", cpu_request, largest.cpu_cores, refused)
    memory = _request("memory_request", memory_request, largest.memory_gib, refused)
    try:
        prio = borg_priority(priority)
    except UnplaceableError:
        prio = None
        refused.add(unmapped("priority"))
    if disk_request is not None:
        refused.add(unmapped("disk_request"))
    return BorgTaskUnits(cpu, memory, None, prio, scheduling_class, frozenset(refused))


def _request(field: str, amount: float | None, largest: float | None, refused: set[str]) -> float | None:
    try:
        return normalised_request(amount, largest)
    except UnplaceableError:
        refused.add(unmapped(field))
        return None
