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
from aiokafka.errors import KafkaError
from opentelemetry import trace
from prometheus_client import Counter

from contracts import telemetry as names
from contracts.base import Contract
from contracts.models import AgentName, ClusterCapabilities
from contracts.topics import CAPABILITIES_TOPIC, Topic
from services.agents.proposals import Candidate
from services.agents.settings import AgentSettings
from services.agents.view import ClusterView, Scope
from services.runtime.changelog import ensure_changelog, read_changelog
from services.runtime.health import HealthServer
from services.runtime.stream_settings import changelog_name
from services.runtime.worker import Incoming, Outgoing, StreamWorker

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.agents")
S = TypeVar("S", bound=AgentSettings)
Policy = Callable[[ClusterView, S, Scope, int], list[Candidate]]
PROPOSALS = Topic.PROPOSALS
WITHHELD = Counter("borg_agent_proposals_withheld_total",
                   "Proposals not sent because the cluster cannot carry the action out (capabilities.v1)",
                   ["agent", "kind"])


class Agent(Generic[S]):
    """One agent's state and policy, independent of Kafka (the benchmark drives it directly)."""

    def __init__(self, name: AgentName, settings: S, policy: Policy[S], clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.settings = settings
        self.policy = policy
        self.clock = clock
        self.view = ClusterView(max_tasks=settings.max_tasks)
        self._sent: dict[tuple[str, str], tuple[bytes, int]] = {}
        self._unsaved: dict[tuple[str, str], tuple[bytes, int]] = {}
        self.unsupported: dict[str, str] = {}
        """Action → why the cluster cannot carry it out, from the latest capabilities.v1 record (empty until
        one arrives: the referee still refuses what its API discovery rules out)."""

    # -- what was proposed, kept across restarts (``memory_topic``) ---------------------------------

    def restore_sent(self, records: dict[bytes, bytes]) -> int:
        """Take back what an earlier process of this agent proposed (the memory topic's live records)."""
        for key, value in records.items():
            slot, sent = _decode_sent(key, value)
            if slot is not None and sent is not None and (slot not in self._sent or self._sent[slot][1] < sent[1]):
                self._sent[slot] = sent
        return len(self._sent)

    def take_unsaved(self) -> list[tuple[bytes, bytes]]:
        """The memory records of proposals sent since the last call (to write before the input is committed)."""
        out = [_encode_sent(slot, sent) for slot, sent in self._unsaved.items()]
        self._unsaved.clear()
        return out

    def observe(self, topic: str, key: str, value: Contract, span: trace.SpanContext | None = None) -> list[Candidate]:
        """Take one input; return the proposals to send now."""
        if topic == CAPABILITIES_TOPIC:
            if isinstance(value, ClusterCapabilities):
                self.take_capabilities(value)
            return []
        now_ms = int(self.clock() * 1000)
        scope = self.view.update(topic, key, value, span)
        if not scope:
            return []
        return [c for c in self.policy(self.view, self.settings, scope, now_ms)
                if self._supported(c) and self._is_news(c, now_ms)]

    def take_capabilities(self, caps: ClusterCapabilities) -> None:
        """What the cluster can carry out from now on (the latest record replaces the earlier ones)."""
        unsupported: dict[str, str] = {u.action: f"its API does not serve {', '.join(u.missing)}"
                                       for u in caps.unsupported}
        if unsupported != self.unsupported:
            if unsupported:
                log.warning("agent %s: cluster %s cannot carry out %s: not proposing them", self.name, caps.cluster,
                            "; ".join(f"{a} ({why})" for a, why in sorted(unsupported.items())))
            else:
                log.info("agent %s: cluster %s supports every action", self.name, caps.cluster)
        self.unsupported = unsupported

    def _supported(self, candidate: Candidate) -> bool:
        kind = candidate.proposal.kind
        if kind not in self.unsupported:
            return True
        WITHHELD.labels(self.name, kind).inc()
        return False

    def _is_news(self, candidate: Candidate, now_ms: int) -> bool:
        p = candidate.proposal
        slot = (p.target.key(), p.kind)
        fingerprint = orjson.dumps(p.payload, option=orjson.OPT_SORT_KEYS)
        last = self._sent.get(slot)
        if last is not None and last[0] == fingerprint and now_ms - last[1] < self.settings.repropose_s * 1000:
            return False
        self._sent[slot] = self._unsaved[slot] = (fingerprint, now_ms)
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


def _encode_sent(slot: tuple[str, str], sent: tuple[bytes, int]) -> tuple[bytes, bytes]:
    return orjson.dumps(list(slot)), orjson.dumps([sent[0].decode(), sent[1]])


def _decode_sent(key: bytes, value: bytes) -> tuple[tuple[str, str] | None, tuple[bytes, int] | None]:
    try:
        target, kind = orjson.loads(key)
        fingerprint, ts_ms = orjson.loads(value)
        if isinstance(target, str) and isinstance(kind, str) and isinstance(fingerprint, str) and type(ts_ms) is int:
            return (target, kind), (fingerprint.encode(), ts_ms)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        pass
    return None, None  # a record that does not parse is skipped: at worst a proposal is sent again


CAPABILITIES_READ_TIMEOUT_S = 15.0


async def restore_capabilities(agent: Agent[S], bootstrap: str, topic: str) -> None:
    """Take the newest capabilities.v1 record from the compacted topic's start.

    A restarted agent resumes after its committed offset, past the referee's last record: without this it
    would propose what the cluster cannot carry out until the referee's next refresh (up to
    ``REFEREE_CAPABILITIES_REFRESH_S``). A record that does not decode is left to the consume loop, which
    dead-letters it; an unreachable or missing topic leaves the agent proposing everything, as before.
    """
    try:
        records = (await asyncio.wait_for(read_changelog(bootstrap, topic, [0]), CAPABILITIES_READ_TIMEOUT_S))[0]
    except (TimeoutError, KafkaError) as exc:
        log.warning("agent %s: could not read %s from its start (%r): capabilities arrive with its next record",
                    agent.name, topic, exc)
        return
    newest: ClusterCapabilities | None = None
    for value in records.values():
        try:
            caps = ClusterCapabilities.model_validate_json(value)
        except ValueError:
            continue
        if newest is None or caps.ts_ms > newest.ts_ms:
            newest = caps
    if newest is not None:
        agent.take_capabilities(newest)
        log.info("agent %s: capabilities of cluster %s restored from %s", agent.name, newest.cluster, topic)


def memory_topic(group_id: str) -> str:
    """The compacted topic (one partition) of what the agents of this group proposed (before the topic prefix)."""
    return changelog_name(group_id, "proposed")


async def run_agent(
    agent: Agent[S], input_topics: Sequence[str], stop: asyncio.Event, health: HealthServer | None = None
) -> StreamWorker:
    """Consume the inputs until `stop` is set (returns the worker for its stats).

    With ``durable_memory`` (the default) what the agent proposed and when is restored from, and written
    to, a compacted topic before the inputs behind it are committed: a restarted agent does not send
    again, within ``repropose_s``, what it had just sent.
    """
    s = agent.settings
    group = s.group_id or f"agent-{agent.name}"
    memory = s.topic(memory_topic(group))

    async def handle(msg: Incoming) -> Sequence[Outgoing]:
        out = await agent.handle(msg)
        if s.durable_memory:
            for key, value in agent.take_unsaved():
                await worker.sink.changelog(memory, 0, key, value)
        return out

    worker = StreamWorker(
        service=f"agent-{agent.name}",
        bootstrap=s.kafka_bootstrap,
        group_id=group,
        input_topics=list(input_topics),
        handler=handle,
        topic_prefix=s.topic_prefix,
        error_policy=s.error_policy,
    )
    if CAPABILITIES_TOPIC in input_topics:
        await restore_capabilities(agent, s.kafka_bootstrap, s.topic(CAPABILITIES_TOPIC))
    if s.durable_memory:
        await ensure_changelog(s.kafka_bootstrap, memory, 1)
        restored = agent.restore_sent((await read_changelog(s.kafka_bootstrap, memory, [0]))[0])
        log.info("agent %s: %d proposals restored from %s", agent.name, restored, memory)
    if health is not None:
        health.add_check("kafka", worker.is_ready)
        health.add_liveness("kafka", worker.stream.progress.check)
    log.info("agent %s consuming %s", agent.name, ", ".join(input_topics))
    await worker.run(stop)
    return worker
