"""The referee's Kafka loop: proposals.v1 → windows → resolve → act → decisions.v1 + actions.v1.

At-least-once: an offset is committed only once every proposal before it has been
decided and the Decision and ActionResult are acknowledged by the broker. A replay
after a crash rebuilds the same windows (event time) and so the same decision ids;
the actuator recognises them on the objects (outcome ``duplicate``).

Tracing: the ``referee decide`` span is a child of the chosen proposal's span
(the first proposal's when nothing is chosen) and links every proposal weighed; its
trace id is written into the Decision, the ActionResult, the Event and the annotations.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import ConsumerRecord, TopicPartition
from opentelemetry import trace
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram

from contracts import ContractError, decode
from contracts import telemetry as names
from contracts.headers import extract_trace
from contracts.models import ActionResult, Decision, Proposal
from contracts.topics import Topic
from services.referee import durable
from services.referee.policy import RefereeState, Resolution, resolve, settle
from services.referee.settings import RefereeSettings
from services.referee.windows import Window, Windows
from services.runtime.batch_stream import Batch, BatchStream, LoopHooks
from services.runtime.changelog import ensure_changelog, read_changelog
from services.runtime.stream_io import Sink
from services.runtime.stream_settings import StreamSettings

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.referee")
PROPOSALS, DECISIONS, ACTIONS = Topic.PROPOSALS, Topic.DECISIONS, Topic.ACTIONS
ACTIONS_TOTAL = PromCounter("borg_referee_actions_total", "ActionResults by action and outcome", ["action", "outcome"])
DECIDE_SECONDS = Histogram(
    "borg_referee_proposal_to_action_seconds",
    "From a proposal's ts_ms to its ActionResult",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


class Actuator(Protocol):
    async def execute(self, decision: Decision, proposal: Proposal, *, dry_run: bool) -> ActionResult: ...


@dataclass
class RefereeStats:
    proposals: int = 0
    decisions: int = 0
    dead_lettered: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)


class Referee:
    def __init__(
        self,
        settings: RefereeSettings,
        sink: Sink,
        actuator: Actuator | None,
        *,
        clock: Callable[[], float] = time.time,
        concurrency: int = 16,
    ) -> None:
        if actuator is None and settings.mode != "shadow":
            raise ValueError(f"mode {settings.mode!r} needs a Kubernetes actuator")
        self.s = settings
        self.sink = sink
        self.actuator = actuator
        self.clock = clock
        self.concurrency = concurrency
        self.state = RefereeState()
        self.windows = Windows(settings.window_ms)
        self.stats = RefereeStats()
        self.ready = asyncio.Event()
        self._stream: BatchStream | None = None
        self._inflight: dict[str, asyncio.Task[ActionResult]] = {}
        self._inflight_windows: dict[str, Window] = {}
        self._deferred: list[Window] = []
        self._gate = asyncio.Semaphore(concurrency)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------ Kafka loop

    def stream(self) -> BatchStream:
        """The referee's consumer on the one stream runtime (built once, on first use)."""
        if self._stream is None:
            settings = StreamSettings(KAFKA_BOOTSTRAP=self.s.kafka_bootstrap,  # type: ignore[call-arg]
                                      BORG_TOPIC_PREFIX=self.s.topic_prefix, ERROR_POLICY=self.s.error_policy)
            self._stream = BatchStream(
                service="referee", settings=settings, sink=self.sink, topics=[PROPOSALS], handle=self._take_batch,
                batch_max=500, group=self.s.group_id,
                hooks=LoopHooks(tick=self._tick, poll_ms=self._poll_timeout_ms, hold=self._held,
                                before_final_commit=self._finish))
        return self._stream

    def is_ready(self) -> bool:
        return self._stream is not None and self._stream.is_ready()

    @property
    def state_topic(self) -> str:
        return self.sink.topic(durable.state_topic(self.s.group_id))

    async def restore(self) -> None:
        """Load the guard state the previous referee of this group left (``REFEREE_DURABLE_STATE``)."""
        if not self.s.durable_state:
            return
        await ensure_changelog(self.s.kafka_bootstrap, self.state_topic, 1, self.s.state_replication)
        records = (await read_changelog(self.s.kafka_bootstrap, self.state_topic, [0]))[0]
        self.state = durable.restore(records, max_decided=self.state.max_decided)
        log.info("referee state restored: %d targets, %d actions and %d disruptions in their windows, "
                 "%d decisions carried out", len(self.state.last), len(self.state.actions),
                 len(self.state.disruptions), len(self.state.decided))

    async def _persist(self, res: Resolution, evicted: list[str]) -> None:
        if not self.s.durable_state:
            return
        horizon_ms = int(max(60.0, self.s.disruption_window_s) * 1000)
        for key, value in durable.records_after(self.state, res, evicted, now_ms=self.now_ms(),
                                                budget_horizon_ms=horizon_ms):
            await self.sink.changelog(self.state_topic, 0, key, value)

    async def run(self, stop: asyncio.Event) -> None:
        await self.restore()
        stream = self.stream()
        ready = asyncio.create_task(self._mirror_ready(stream))
        try:
            await stream.run(stop)
        finally:
            ready.cancel()
            for task in self._inflight.values():
                task.cancel()

    async def _mirror_ready(self, stream: BatchStream) -> None:
        await stream.ready.wait()
        self.ready.set()

    async def _take_batch(self, batch: Batch) -> None:
        closed: list[Window] = []
        for tp, records in batch.items():
            for record in records:
                closed += await self._take(tp, record)
        self._launch(closed)

    async def _tick(self) -> None:
        self._launch(self.windows.due(self.now_ms()))
        if self._reap():
            await self.sink.push()

    async def _finish(self) -> None:
        """On stop: decide every open window and wait for what is in flight (then the stream commits)."""
        self._launch(self.windows.drain())
        while self._inflight or self._deferred:
            if self._inflight:
                await asyncio.wait(set(self._inflight.values()))
            self._reap()
            self._launch([])
        await self.sink.flush()

    def _poll_timeout_ms(self) -> int:
        timeout = 20 if (self._inflight or self._deferred) else 200
        deadline = self.windows.next_deadline_ms()
        if deadline is not None:
            timeout = max(1, min(timeout, deadline - self.now_ms()))
        return timeout

    async def _take(self, tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> list[Window]:
        try:
            proposal = decode(Proposal, record.value)
        except ContractError as exc:
            await self.sink.dead_letter_record(record, exc.message, exc.kind)
            self.stats.dead_lettered = self.sink.dead_lettered
            return []
        self.stats.proposals += 1
        return self.windows.add(proposal, extract_trace(record.headers), tp, record.offset, self.now_ms())

    def _held(self) -> dict[TopicPartition, int]:
        """Per partition, the offset of the oldest proposal not yet decided and acknowledged.

        A decision is acknowledged once the stream's commit round has flushed the sink, which it
        does before committing: windows still deciding (or waiting for their target) hold theirs.
        """
        return self.windows.held_offsets([*self._inflight_windows.values(), *self._deferred])

    # ------------------------------------------------------------------ deciding

    def _launch(self, due: list[Window]) -> None:
        """Resolve due windows in order (the guards see each other) and act on them in the background.

        One decision per target at a time: a window whose target is still being acted on waits.
        """
        waiting, self._deferred = self._deferred, []
        now = self.now_ms()
        for w in [*waiting, *sorted(due, key=lambda w: (w.start_ts_ms, w.target.key()))]:
            key = w.target.key()
            if key in self._inflight:
                self._deferred.append(w)
                continue
            res = resolve(w.target, w.proposals, now_ms=now, state=self.state, s=self.s)
            task = asyncio.create_task(self._gated(w, res), name=f"decide {key}")
            self._inflight[key] = task
            self._inflight_windows[key] = w

    def _reap(self) -> int:
        """Collect finished decisions (re-raising a crash); returns how many finished."""
        done = [k for k, t in self._inflight.items() if t.done()]
        for key in done:
            task = self._inflight.pop(key)
            self._inflight_windows.pop(key, None)
            task.result()
        return len(done)

    async def _gated(self, window: Window, res: Resolution) -> ActionResult:
        async with self._gate:
            return await self._carry_out(window, res)

    async def decide(self, windows: list[Window]) -> list[ActionResult]:
        """Resolve and act on windows now, waiting for the results (tools and tests)."""
        now = self.now_ms()
        planned = [
            (w, resolve(w.target, w.proposals, now_ms=now, state=self.state, s=self.s))
            for w in sorted(windows, key=lambda w: (w.start_ts_ms, w.target.key()))
        ]
        return list(await asyncio.gather(*(self._gated(w, r) for w, r in planned)))

    async def _carry_out(self, window: Window, res: Resolution) -> ActionResult:
        lead = res.chosen.proposal_id if res.chosen is not None else window.proposals[0].proposal_id
        links = []
        for ctx in window.contexts.values():
            sc = trace.get_current_span(ctx).get_span_context()
            if sc.is_valid:
                links.append(trace.Link(sc))
        key = window.target.key()
        with tracer.start_as_current_span(
            names.SPAN_REFEREE_DECIDE, context=window.contexts[lead], links=links
        ) as span:
            trace_id = f"{span.get_span_context().trace_id:032x}"
            decision = res.decision.model_copy(update={"trace_id": trace_id})
            span.set_attribute(names.DECISION_ID, decision.decision_id)
            # The decision consumes the window's proposals: name the topic like a consumer span does.
            span.set_attribute(names.MESSAGING_SYSTEM, "kafka")
            span.set_attribute(names.MESSAGING_DESTINATION, self.sink.topic(PROPOSALS))
            span.set_attribute(names.DECISION_ACTION, decision.action)
            span.set_attribute(names.DECISION_MODE, decision.mode)
            span.set_attribute(names.DECISION_TARGET, key)
            span.set_attribute(names.DECISION_REASON, decision.reason[:500])
            span.set_attribute(names.PROPOSAL_COUNT, len(decision.proposals))
            await self.sink.send(DECISIONS, key, decision, None)
            result = await self._act(decision, res)
            evicted = settle(self.state, res, result.outcome)
            await self._persist(res, evicted)
            span.set_attribute(names.ACTION_OUTCOME, result.outcome)
            await self.sink.send(ACTIONS, key, result, None)
        self.stats.decisions += 1
        self.stats.outcomes[result.outcome] += 1
        ACTIONS_TOTAL.labels(result.action, result.outcome).inc()
        for p in window.proposals:
            DECIDE_SECONDS.observe(max(0.0, (result.ts_ms - p.ts_ms) / 1000.0))
        return result

    async def _act(self, decision: Decision, res: Resolution) -> ActionResult:
        def result(outcome: str, message: str) -> ActionResult:
            return ActionResult(
                decision_id=decision.decision_id,
                ts_ms=self.now_ms(),
                target=decision.target,
                action=decision.action,
                outcome=outcome,  # type: ignore[arg-type]
                message=message,
                trace_id=decision.trace_id,
            )

        if res.chosen is None:
            return result("refused", decision.reason)
        if res.replay and self.s.mode != "apply":
            return result("duplicate", decision.reason)
        if self.s.mode == "shadow" or self.actuator is None:
            return result("shadow", f"shadow mode: {decision.action} decided, nothing written")
        return await self.actuator.execute(decision, res.chosen, dry_run=self.s.mode == "dry-run")
