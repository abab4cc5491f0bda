"""A stage's side of a rollout: load the candidate ``ROLLOUT.json`` names, judge the shadow comparison, move on.

:class:`RolloutWatcher` re-reads the model root's rollout state every ``ROLLOUT_POLL_S``. While a
rollout is active it holds the candidate (loaded and checked like ``CURRENT``, by the stage's own
loader) as :attr:`live`, which the processor reads once per batch: ``None`` costs the stage
nothing. Each poll judges the stage's :class:`ShadowStats` (``rollout.judge``), applies the step
machine (``rollout.advance``) and writes the transition back (re-reading first, so an operator's
``borgctl model pause|rollback`` made meanwhile wins), appends the event and, after the last step,
makes the candidate ``CURRENT``. A rollback is logged (warning, with the reason), counted in
``borg_rollout_rollbacks_total`` and takes effect in this process at once, even when the model
root is read-only (it is then remembered for this rollout instead of written).

With several replicas each judges the windows of its own partitions: any of them may roll back
(the safe direction); the first whose dwell and samples pass advances the shared step.

Every transition this stage makes (``origin`` ``judged``) and every new state it finds in the file
(``observed``: an operator's ``borgctl model``, another replica) is also published to
``rollouts.v1`` (``RolloutEvent``, keyed by the model) through a Sink of its own, opened at the
first event: a stage with no rollout opens no producer, and a failed event write never fails the
stream's own flush (it is logged and retried at the next poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

import orjson
from prometheus_client import Counter, Gauge

from contracts.models import RolloutEvent
from contracts.topics import Topic
from services.runtime import rollout
from services.runtime.model_watch import ModelRefusedError
from services.runtime.pause import pause
from services.runtime.rollout import Comparison, RolloutFields, RolloutState
from services.runtime.settings import RuntimeSettings
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)
T = TypeVar("T")
HEADER = "borg-rollout"

STEP = Gauge("borg_rollout_step", "Rollout step (1-based; 0 shadow only, -1 none)", ["model"])
FRACTION = Gauge("borg_rollout_fraction", "Share of nodes the candidate answers for", ["model"])
AGREEMENT = Gauge("borg_shadow_agreement", "Share of windows where candidate and current give the same answer",
                  ["model"])
METRIC = Gauge("borg_shadow_metric", "Online metric of each model on the same labelled windows",
               ["model", "metric", "which"])
ROLLBACKS = Counter("borg_rollout_rollbacks_total", "Rollouts this stage rolled back", ["model"])
TRANSITIONS = Counter("borg_rollout_transitions_total", "Rollout transitions written by this stage",
                      ["model", "status"])
EVENTS = Counter("borg_rollout_events_total", "rollouts.v1 records, by outcome (published, failed, dropped)",
                 ["model", "outcome"])
EVENTS_KEPT = 100
"""Events waiting for rollouts.v1 (broker away): the oldest are dropped beyond this."""
PUBLISH_LAST_S = 5.0
"""On stop, how long the last rollouts.v1 records may take before the stage exits without them."""
SUMMARY_METRICS = frozenset({"agreement", "mean_abs_delta", "rank_agreement"})
"""Summary figures an event carries besides ``<metric>_current`` / ``<metric>_candidate``."""


class ShadowStats(Protocol):
    compared: int
    labels_expected: bool
    """A truth source is configured: a step never advances before labelled windows were judged."""

    def reset(self) -> None: ...

    def agreement(self) -> float | None: ...

    def comparisons(self) -> list[Comparison]: ...

    def summary(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Live(Generic[T]):
    """The candidate in use, its rollout and the header outputs carry meanwhile."""

    model: T
    state: RolloutState
    headers: list[tuple[str, bytes]]


class RolloutWatcher(Generic[T]):
    def __init__(self, name: str, root: Path, loader: Callable[[Path], T], stats: ShadowStats,
                 settings: RolloutFields, *, serving: Callable[[], str],
                 promoted: Callable[[], object] | None = None) -> None:
        self.name = name
        self.root = root
        self.loader = loader
        self.stats = stats
        self.settings = settings
        self.serving = serving
        """The version ``CURRENT`` serves in this process (a candidate equal to it is no candidate)."""
        self.promoted = promoted
        self.live: Live[T] | None = None
        self.enabled = (root / rollout.CURRENT_FILE).is_file()  # a bare version directory has no rollouts
        self._started: int | None = None
        self._vetoed: set[int] = set()
        self._shadow_file = root / f"{rollout.SHADOW_PREFIX}{socket.gethostname()}.json"
        self._seen: tuple[int, str, str, int] | None = None
        """(started_ms, candidate, status, step) of the last state followed or made: an event when it differs."""
        self.events: list[RolloutEvent] = []
        """Waiting for rollouts.v1 (``run``'s publisher task writes them)."""
        self._events_lock = threading.Lock()  # ``check`` appends on a worker thread, the publisher removes
        self._sink: Sink | None = None
        STEP.labels(name).set(-1)

    def _drop(self) -> None:
        if self.live is not None:
            log.info("%s rollout: candidate %s dropped", self.name, self.live.state.candidate)
        self.live = None
        STEP.labels(self.name).set(-1)
        FRACTION.labels(self.name).set(0)

    def check(self, now_ms: int | None = None) -> None:
        """One poll: follow the state file, judge, write the transition."""
        if not self.enabled:
            return
        now = int(time.time() * 1000) if now_ms is None else now_ms
        state = rollout.read_state(self.root)
        if state is not None and state.started_ms not in self._vetoed and _key(state) != self._seen:
            # an active rollout, or any change after one was followed (not an old rollout found at start)
            if state.active or self._seen is not None:
                self._event(state, None, "observed", now)
            self._seen = _key(state)
        if state is None or not state.active or state.candidate == self.serving() or state.started_ms in self._vetoed:
            self._drop()
            return
        if state.started_ms != self._started:
            self.stats.reset()
            self._started = state.started_ms
        live = self.live
        if live is None or live.state.candidate != state.candidate:
            try:
                model = self.loader(self.root / state.candidate)
            except ModelRefusedError as exc:
                self._transition(state, rollout.replace_status(state, "rolled_back", f"candidate refused: {exc}",
                                                               now), now)
                return
            log.info("%s rollout: candidate %s loaded (%s)", self.name, state.candidate, state.status)
        else:
            model = live.model
        self.live = Live(model, state, [(HEADER, state.label().encode())])
        verdict = rollout.judge(self.stats.comparisons(), self.stats.agreement(), self.stats.compared,
                                margin=self.settings.rollout_margin, min_samples=self.settings.rollout_min_samples,
                                min_agreement=self.settings.rollout_min_agreement,
                                labels_expected=self.stats.labels_expected)
        self._export(state, verdict.details)
        following = rollout.advance(state, now, verdict)
        if following != state:
            self._transition(state, following, now)

    def _transition(self, before: RolloutState, after: RolloutState, now_ms: int) -> None:
        if after.status == "rolled_back":
            ROLLBACKS.labels(self.name).inc()
            self._vetoed.add(after.started_ms)
            log.warning("%s rollout of %s rolled back at step %d (%g of nodes): %s", self.name, after.candidate,
                        before.step + 1, before.fraction, after.reason)
            self._drop()
        else:
            log.warning("%s rollout of %s: %s, step %d/%d (%g of nodes)", self.name, after.candidate, after.status,
                        after.step + 1, len(after.steps), after.fraction)
        TRANSITIONS.labels(self.name, after.status).inc()
        try:
            if rollout.read_state(self.root) != before:
                if after.status == "rolled_back":  # holds in this process whatever the file says
                    self._made(before, after, now_ms)
                return  # changed meanwhile (an operator, another replica): the next poll follows it
            rollout.write_state(self.root, after)
            rollout.append_event(self.root, {"ts_ms": now_ms, "model": self.name, "from": before.status,
                                             "status": after.status, "step": after.step + 1,
                                             "fraction": after.fraction, "candidate": after.candidate,
                                             "baseline": after.baseline, "reason": after.reason,
                                             "by": socket.gethostname(), "shadow": self.stats.summary()})
            if after.status == "promoted":
                rollout.switch_current(self.root, after.candidate)
                if self.promoted is not None:
                    self.promoted()
        except OSError as exc:
            log.error("%s rollout: cannot write %s (%s); the transition holds in this process only",
                      self.name, self.root / rollout.STATE_FILE, exc)
        self._made(before, after, now_ms)
        if after.status == "promoted":
            self._drop()

    def _made(self, before: RolloutState, after: RolloutState, now_ms: int) -> None:
        self._seen = _key(after)
        self._event(after, before.status, "judged", now_ms)

    def _event(self, state: RolloutState, previous: rollout.Status | None, origin: Literal["judged", "observed"],
               now_ms: int) -> None:
        # the comparison of this rollout only (a new one is seen before the stats are reset for it)
        summary = self.stats.summary() if state.started_ms == self._started else {}
        metrics = {k: float(v) for k, v in summary.items()
                   if isinstance(v, float) and math.isfinite(v)
                   and (k in SUMMARY_METRICS or k.endswith(("_current", "_candidate")))}
        try:
            event = RolloutEvent(
                model=self.name, ts_ms=now_ms, rollout_id=state.started_ms, candidate=state.candidate,
                baseline=state.baseline, status=state.status, previous_status=previous, step=state.step + 1,
                steps=len(state.steps), fraction=1.0 if state.status == "promoted" else state.fraction,
                reason=state.reason[:1000], origin=origin,
                reporter=socket.gethostname(), compared=int(summary.get("compared") or 0),
                labelled=int(summary.get("labelled") or 0), metrics=dict(sorted(metrics.items())[:32]))
        except ValueError as exc:  # a hand-edited ROLLOUT.json the contract refuses: the file still rules
            log.warning("%s rollout: no rollouts.v1 record for %s (%s)", self.name, state.candidate, exc)
            return
        with self._events_lock:
            self.events.append(event)
            if len(self.events) > EVENTS_KEPT:
                EVENTS.labels(self.name, "dropped").inc(len(self.events) - EVENTS_KEPT)
                del self.events[:-EVENTS_KEPT]

    async def publish(self) -> None:
        """Write the waiting events to rollouts.v1 (where the stage's settings say); on failure kept for the next
        poll."""
        with self._events_lock:
            events = list(self.events)
        if not events or not isinstance(self.settings, RuntimeSettings):
            return
        try:
            if self._sink is None:
                sink = Sink(bootstrap=self.settings.kafka_bootstrap, service=f"{self.name}-rollout",
                            topic_prefix=self.settings.topic_prefix, producer_spans=False)
                self._sink = sink  # closed on failure, so a start that fails half-way is stopped too
                await sink.start()
            for event in events:
                await self._sink.send(Topic.ROLLOUTS, event.model, event, None)
            await self._sink.flush()
        except Exception as exc:  # a side channel: serving CURRENT never depends on it
            EVENTS.labels(self.name, "failed").inc()
            log.warning("%s rollout: rollouts.v1 not written (%s: %s); again at the next poll", self.name,
                        type(exc).__name__, exc)
            await self._close()
            return
        sent = set(map(id, events))
        with self._events_lock:
            self.events = [e for e in self.events if id(e) not in sent]
        EVENTS.labels(self.name, "published").inc(len(events))

    async def _close(self) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            with contextlib.suppress(Exception):
                await sink.stop()

    def _export(self, state: RolloutState, details: dict[str, float]) -> None:
        STEP.labels(self.name).set(0 if state.status == "shadow" else state.step + 1)
        FRACTION.labels(self.name).set(state.fraction)
        agreement = self.stats.agreement()
        if agreement is not None:
            AGREEMENT.labels(self.name).set(agreement)
        for c in self.stats.comparisons():
            METRIC.labels(self.name, c.name, "current").set(c.current)
            METRIC.labels(self.name, c.name, "candidate").set(c.candidate)
        try:
            rollout.write_atomically(self._shadow_file, orjson.dumps(
                {"ts_ms": int(time.time() * 1000), "started_ms": state.started_ms, "candidate": state.candidate,
                 **self.stats.summary(), **details}))
        except OSError:
            pass  # read-only model root: the metrics and the log still say it

    async def run(self, stop: asyncio.Event) -> None:
        # the publisher is a task of its own: a broker that is away must not hold up the judgement (a rollback)
        publisher = asyncio.create_task(self._publish_loop(stop))
        try:
            while not stop.is_set():
                if not await pause(stop, self.settings.rollout_poll_s):
                    try:
                        await asyncio.to_thread(self.check)
                    except Exception:  # a rollout problem must never stop the stage serving CURRENT
                        log.exception("%s rollout check failed", self.name)
        finally:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(publisher, PUBLISH_LAST_S)  # the last records, when the broker answers
            await self._close()

    async def _publish_loop(self, stop: asyncio.Event) -> None:
        while True:
            await self.publish()  # the first: what the check before the stream started found
            if stop.is_set() or await pause(stop, min(self.settings.rollout_poll_s, 1.0)):
                await self.publish()
                return


def _key(state: RolloutState) -> tuple[int, str, str, int]:
    return state.started_ms, state.candidate, state.status, state.step
