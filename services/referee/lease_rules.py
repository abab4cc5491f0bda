"""Pure leader-election rules over a ``coordination.k8s.io`` Lease (client-go's, without its clock).

A candidate never compares its clock with the holder's ``renewTime`` (the replicas' clocks may
disagree): like client-go's ``LeaderElector`` it remembers when it last *saw the record change*
and treats the lease as expired once the record stayed the same for ``leaseDurationSeconds`` of
its own monotonic time. A holder that stops renewing is therefore replaced at most one lease
duration (plus a retry period) after the candidate first saw its last renewal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Step = Literal["create", "acquire", "renew", "wait"]


@dataclass(frozen=True)
class LeaseRecord:
    """What the election reads from a Lease's spec (``renew_time`` is opaque: compared, never parsed)."""

    holder: str | None
    duration_s: int
    transitions: int
    renew_time: str | None
    resource_version: str | None


@dataclass
class Observation:
    """The newest record this candidate saw and when (its own monotonic seconds) it last changed."""

    record: LeaseRecord | None = None
    changed_at: float = 0.0

    def see(self, record: LeaseRecord | None, now: float) -> None:
        if record is None or self.record is None or _identity(record) != _identity(self.record):
            self.changed_at = now
        self.record = record


def _identity(record: LeaseRecord) -> tuple[str | None, str | None, int]:
    return record.holder, record.renew_time, record.transitions


def next_step(observation: Observation, me: str, now: float) -> Step:
    """What ``me`` does with the lease it just read (see ``Observation``)."""
    record = observation.record
    if record is None:
        return "create"
    if record.holder == me:
        return "renew"
    if not record.holder:  # released on a clean stop: take it at once
        return "acquire"
    if now - observation.changed_at >= record.duration_s:
        return "acquire"
    return "wait"


def transitions_after(record: LeaseRecord | None, me: str) -> int:
    """``leaseTransitions`` once ``me`` holds the lease: +1 when the holder changes."""
    if record is None:
        return 0
    return record.transitions if record.holder == me else record.transitions + 1
