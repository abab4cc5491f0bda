"""Decision windows: proposals for one target collected over ``window_ms``, plus Kafka offset bookkeeping.

A window opens at its first proposal's event time ``ts_ms`` and takes every later
proposal for the same target with ``ts_ms < start + window_ms`` (so a replay groups
the same proposals again); a proposal past that end closes the window at once. A
window also closes ``window_ms`` after its first proposal *arrived* (wall clock),
which is what closes it in live operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import TopicPartition
from opentelemetry import context as otel_context

from contracts.models import Proposal, TargetRef


@dataclass
class Window:
    target: TargetRef
    start_ts_ms: int
    deadline_ms: int
    proposals: list[Proposal] = field(default_factory=list)
    contexts: dict[str, otel_context.Context] = field(default_factory=dict)  # proposal id → trace context
    offsets: list[tuple[TopicPartition, int]] = field(default_factory=list)
    arrived_ms: list[int] = field(default_factory=list)


class Windows:
    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.open: dict[str, Window] = {}

    def add(
        self,
        proposal: Proposal,
        ctx: otel_context.Context,
        tp: TopicPartition,
        offset: int,
        now_ms: int,
    ) -> list[Window]:
        """Put a proposal into its target's window; returns windows this closed."""
        key = proposal.target.key()
        closed: list[Window] = []
        window = self.open.get(key)
        if window is not None and (tp, offset) in window.offsets:
            return closed  # the same record again (a batch re-run record by record after an error)
        if window is not None and proposal.ts_ms >= window.start_ts_ms + self.window_ms:
            closed.append(self.open.pop(key))
            window = None
        if window is None:
            window = Window(proposal.target, proposal.ts_ms, now_ms + self.window_ms)
            self.open[key] = window
        window.proposals.append(proposal)
        window.contexts[proposal.proposal_id] = ctx
        window.offsets.append((tp, offset))
        window.arrived_ms.append(now_ms)
        return closed

    def due(self, now_ms: int) -> list[Window]:
        ready = [k for k, w in self.open.items() if w.deadline_ms <= now_ms]
        return [self.open.pop(k) for k in ready]

    def drain(self) -> list[Window]:
        out = list(self.open.values())
        self.open.clear()
        return out

    def next_deadline_ms(self) -> int | None:
        return min((w.deadline_ms for w in self.open.values()), default=None)

    def held_offsets(self, also: list[Window] | None = None) -> dict[TopicPartition, int]:
        """Per partition, the lowest offset still in an open window (or in `also`): not to be committed past."""
        out: dict[TopicPartition, int] = {}
        for w in [*self.open.values(), *(also or [])]:
            for tp, off in w.offsets:
                if tp not in out or off < out[tp]:
                    out[tp] = off
        return out
