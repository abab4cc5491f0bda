"""The node agent: sample on a fixed schedule → spool → ship. Sampling never waits for Kafka.

Ticks are aligned to multiples of the interval on the wall clock, so
``seq = tick_ms // interval_ms`` increases by exactly one per interval, survives
restarts, and a gap in ``seq`` always means a sample was lost or skipped (an overrun
sampler skips ticks instead of bursting; ``borg_node_agent_skipped_intervals_total``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from contracts import telemetry as names
from contracts.codec import ContractError
from services.node_agent import nodestate
from services.node_agent.live import LiveSampler
from services.node_agent.metrics import INVALID, SAMPLE_SECONDS, SAMPLES, SKIPPED
from services.node_agent.shipper import Shipper
from services.node_agent.spool import Spool
from services.runtime.pause import pause

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.node_agent")


class Source(Protocol):
    name: str

    def open(self) -> None: ...

    def sample(self, *, ts_ms: int, seq: int, interval_ms: int) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


class LiveSource:
    """This node through perf_event_open and /proc (see live.py)."""

    name = "live"

    def __init__(self, node: str, sampler: LiveSampler) -> None:
        self.node = node
        self.sampler = sampler

    def open(self) -> None:
        self.sampler.open()

    def sample(self, *, ts_ms: int, seq: int, interval_ms: int) -> list[dict[str, Any]]:
        s = self.sampler.sample()
        return [
            nodestate.nodestate_dict(
                node=self.node,
                ts_ms=ts_ms,
                seq=seq,
                interval_ms=interval_ms,
                source=self.sampler.source,
                pmu=self.sampler.pmu,
                supported_events=s.supported_events,
                counters=s.counters,
                cpu_util=s.cpu_util,
                mem_util=s.mem_util,
                cpu_freq_mhz=s.cpu_freq_mhz,
                cgroups=s.cgroups or None,
                metrics=s.metrics or None,
            )
        ]

    def close(self) -> None:
        self.sampler.close()


@dataclass
class AgentStats:
    samples: int = 0
    spooled: int = 0
    invalid: int = 0
    skipped: int = 0
    last_sample_monotonic: float = 0.0
    cycle_cpu_s: float = 0.0


class NodeAgent:
    def __init__(
        self,
        *,
        source: Source,
        spool: Spool,
        shipper: Shipper,
        interval_s: float,
        validate: bool = True,
        drain_timeout_s: float = 5.0,
    ) -> None:
        self.source = source
        self.spool = spool
        self.shipper = shipper
        self.interval_s = interval_s
        self.interval_ms = max(1, round(interval_s * 1000))
        self.validate = validate
        self.drain_timeout_s = drain_timeout_s
        self.stats = AgentStats()
        self._last_tick_ms: int | None = None

    def healthy(self) -> bool:
        """Ready while samples keep coming (within three intervals)."""
        last = self.stats.last_sample_monotonic
        return last > 0 and time.monotonic() - last < 3 * self.interval_s + 1.0

    def sample_once(self, tick_ms: int) -> int:
        """One cycle: read the source, build and check NodeState, append to the spool. Returns records spooled."""
        cpu0 = time.process_time()
        started = time.perf_counter()
        interval_ms = self.interval_ms if self._last_tick_ms is None else max(1, tick_ms - self._last_tick_ms)
        self._last_tick_ms = tick_ms
        seq = tick_ms // self.interval_ms
        spooled = 0
        with tracer.start_as_current_span(names.SPAN_NODE_SAMPLE, kind=SpanKind.PRODUCER) as span:
            states = self.source.sample(ts_ms=tick_ms, seq=seq, interval_ms=interval_ms)
            headers = nodestate.headers()
            for state in states:
                if self.validate:
                    try:
                        nodestate.validate(state)
                    except ContractError as exc:
                        self.stats.invalid += 1
                        INVALID.inc()
                        log.error("sample of %s not sent: %s", state.get("node"), exc)
                        continue
                if self.spool.append(str(state["node"]).encode(), orjson.dumps(state), headers) >= 0:
                    spooled += 1
            if states:
                span.set_attribute(names.NODE_NAME, str(states[0]["node"]))
                span.set_attribute(names.MESSAGING_BATCH_COUNT, spooled)
        self.shipper.wake.set()
        self.stats.samples += 1
        self.stats.spooled += spooled
        self.stats.last_sample_monotonic = time.monotonic()
        self.stats.cycle_cpu_s += time.process_time() - cpu0
        SAMPLES.labels(self.source.name).inc()
        SAMPLE_SECONDS.observe(time.perf_counter() - started)
        return spooled

    async def run(self, stop: asyncio.Event) -> None:
        """Sample until ``stop``; the shipper runs alongside and drains what it can."""
        self.source.open()
        self._last_tick_ms = int(time.time() * 1000)  # the first sample covers open → first tick
        shipper_stop = asyncio.Event()
        shipper = asyncio.create_task(
            self.shipper.run(shipper_stop, drain_on_stop_s=self.drain_timeout_s), name="node-agent-shipper"
        )
        try:
            await self._sample_loop(stop)
        finally:
            shipper_stop.set()
            try:
                # Undelivered records stay in the spool on disk and go out after the next start.
                await asyncio.wait_for(shipper, timeout=self.drain_timeout_s + 1.0)
            except TimeoutError:
                log.warning("stopping with %d record(s) still spooled in %s", len(self.spool), self.spool.dir)
            finally:
                self.source.close()
                self.spool.close()

    async def _sample_loop(self, stop: asyncio.Event) -> None:
        step = self.interval_ms
        next_tick = (math.floor(time.time() * 1000 / step) + 1) * step
        while not stop.is_set():
            delay = next_tick / 1000 - time.time()
            if delay > 0 and await pause(stop, delay):
                break
            self.sample_once(next_tick)
            now_ms = time.time() * 1000
            following = next_tick + step
            if now_ms >= following:  # overran: skip to the next future tick, never burst
                missed = int((now_ms - following) // step) + 1
                self.stats.skipped += missed
                SKIPPED.inc(missed)
                following += missed * step
            next_tick = following
