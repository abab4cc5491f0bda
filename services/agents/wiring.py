"""Thin Kafka wiring shared by the three agents: inputs → view → policy → proposals.v1.

The StreamWorker consumes every input topic in one consumer group, keeps the
latest state per key in a ClusterView, re-evaluates only the targets the input can
affect, and sends proposals that are new or changed (an unchanged proposal is re-sent
every ``repropose_s``). Outputs continue the input's trace; the ``agent evaluate``
span links the span contexts of every other input a proposal used.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import orjson
from opentelemetry import trace

from contracts import telemetry as names
from contracts.base import Contract
from contracts.models import AgentName
from services.agents.proposals import Candidate
from services.agents.settings import AgentSettings
from services.agents.view import ClusterView, Scope
from services.runtime.health import HealthServer
from services.runtime.worker import Incoming, Outgoing, StreamWorker

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.agents")
S = TypeVar("S", bound=AgentSettings)
Policy = Callable[[ClusterView, S, Scope, int], list[Candidate]]
PROPOSALS = "proposals.v1"


class Agent(Generic[S]):
    """One agent's state and policy, independent of Kafka (the benchmark drives it directly)."""

    def __init__(self, name: AgentName, settings: S, policy: Policy[S], clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.settings = settings
        self.policy = policy
        self.clock = clock
        self.view = ClusterView(max_tasks=settings.max_tasks)
        self._sent: dict[tuple[str, str], tuple[bytes, int]] = {}

    def observe(self, topic: str, key: str, value: Contract, span: trace.SpanContext | None = None) -> list[Candidate]:
        """Take one input; return the proposals to send now."""
        now_ms = int(self.clock() * 1000)
        scope = self.view.update(topic, key, value, span)
        if not scope:
            return []
        return [c for c in self.policy(self.view, self.settings, scope, now_ms) if self._is_news(c, now_ms)]

    def _is_news(self, candidate: Candidate, now_ms: int) -> bool:
        p = candidate.proposal
        slot = (p.target.key(), p.kind)
        fingerprint = orjson.dumps(p.payload, option=orjson.OPT_SORT_KEYS)
        last = self._sent.get(slot)
        if last is not None and last[0] == fingerprint and now_ms - last[1] < self.settings.repropose_s * 1000:
            return False
        self._sent[slot] = (fingerprint, now_ms)
        return True

    async def handle(self, msg: Incoming) -> Sequence[Outgoing]:
        own = trace.get_current_span(msg.ctx).get_span_context()
        with tracer.start_as_current_span(names.SPAN_AGENT_EVALUATE) as span:
            span.set_attribute(names.PROPOSAL_AGENT, self.name)
            candidates = self.observe(msg.base_topic, msg.key or "", msg.value, own)
            linked: set[tuple[int, int]] = {(own.trace_id, own.span_id)}
            for c in candidates:
                for src in c.sources:
                    ctx = src.span
                    if ctx is not None and ctx.is_valid and (ctx.trace_id, ctx.span_id) not in linked:
                        linked.add((ctx.trace_id, ctx.span_id))
                        span.add_link(ctx)
            span.set_attribute(names.PROPOSAL_COUNT, len(candidates))
            if len(candidates) == 1:
                span.set_attribute(names.PROPOSAL_KIND, candidates[0].proposal.kind)
                span.set_attribute(names.PROPOSAL_ID, candidates[0].proposal.proposal_id)
        return [Outgoing(PROPOSALS, c.proposal.target.key(), c.proposal) for c in candidates]


async def run_agent(
    agent: Agent[S], input_topics: Sequence[str], stop: asyncio.Event, health: HealthServer | None = None
) -> StreamWorker:
    """Consume the inputs until `stop` is set (returns the worker for its stats)."""
    s = agent.settings
    worker = StreamWorker(
        service=f"agent-{agent.name}",
        bootstrap=s.kafka_bootstrap,
        group_id=s.group_id or f"agent-{agent.name}",
        input_topics=list(input_topics),
        handler=agent.handle,
        topic_prefix=s.topic_prefix,
        error_policy=s.error_policy,
    )
    if health is not None:
        health.add_check("kafka", worker.is_ready)
        health.add_liveness("kafka", worker.stream.progress.check)
    log.info("agent %s consuming %s", agent.name, ", ".join(input_topics))
    await worker.run(stop)
    return worker
