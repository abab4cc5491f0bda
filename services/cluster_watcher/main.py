"""`borgctl serve cluster-watcher`: Kubernetes watches → taskevents.v1 and clusterstate.v1."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import orjson
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from contracts import telemetry as names
from contracts.models import ClusterState, TaskEvent
from contracts.topics import Topic
from featurelib.borg_units import LargestNode
from services.cluster_watcher.model import ClusterKey, ClusterModel, Obj
from services.cluster_watcher.reflector import Reflector, Source
from services.cluster_watcher.resources import DEPLOYMENTS, NODES, PODS
from services.cluster_watcher.settings import WatcherSettings
from services.runtime.health import HealthServer
from services.runtime.pause import pause
from services.runtime.producer import Producer
from services.runtime.service import run_service

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.cluster_watcher")
TASKEVENTS = Topic.TASKEVENTS
CLUSTERSTATE = Topic.CLUSTERSTATE


class Watcher:
    """Three reflectors feeding one ClusterModel; task events sent as seen, state on change or heartbeat."""

    def __init__(
        self,
        settings: WatcherSettings,
        source: Source,
        producer: Producer,
        *,
        clock: Callable[[], float] = time.time,
        resume_from: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.clock = clock
        self.model = ClusterModel(settings)
        self.task_events_sent = 0
        self.states_sent = 0
        self._last: dict[ClusterKey, tuple[bytes, int]] = {}
        self._largest = LargestNode()
        resume = resume_from or {}
        timeout = settings.watch_timeout_s
        self.reflectors = [
            Reflector(
                PODS,
                source,
                on_replace=self._pods_listed,
                on_event=self._pod_event,
                timeout_s=timeout,
                resume_from=resume.get("pods"),
            ),
            Reflector(
                NODES,
                source,
                on_replace=self._nodes_listed,
                on_event=self._node_event,
                timeout_s=timeout,
                resume_from=resume.get("nodes"),
            ),
            Reflector(
                DEPLOYMENTS,
                source,
                on_replace=self._deployments_listed,
                on_event=self._deployment_event,
                timeout_s=timeout,
                resume_from=resume.get("deployments"),
            ),
        ]

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(r.run(stop), name=f"watch-{r.res.plural}") for r in self.reflectors]
        tasks.append(asyncio.create_task(self._state_loop(stop), name="cluster-state"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await self.producer.flush()

    # ------------------------------------------------------------------ watch callbacks

    async def _pods_listed(self, items: list[Obj]) -> None:
        await self._publish("list", PODS.plural, self.model.replace_pods(items, self.now_ms()))

    async def _pod_event(self, kind: str, obj: Obj) -> None:
        await self._publish(kind, PODS.plural, self.model.pod_event(kind, obj, self.now_ms()))

    async def _nodes_listed(self, items: list[Obj]) -> None:
        await self._publish("list", NODES.plural, self.model.replace_nodes(items, self.now_ms()))
        self._note_largest()

    async def _node_event(self, kind: str, obj: Obj) -> None:
        await self._publish(kind, NODES.plural, self.model.node_event(kind, obj, self.now_ms()))
        self._note_largest()

    def _note_largest(self) -> None:
        # taskevents.v1 carries cores and GiB; the risk stage divides by these (its RISK_LARGEST_NODE_*
        # settings) to reach the Borg scale, so an operator needs to see when they change
        largest = self.model.largest_node()
        if largest != self._largest:
            self._largest = largest
            log.info("largest node allocatable: %s cores, %s GiB "
                     "(RISK_LARGEST_NODE_CPU / RISK_LARGEST_NODE_MEMORY_GIB)", largest.cpu_cores, largest.memory_gib)

    async def _deployments_listed(self, items: list[Obj]) -> None:
        self.model.replace_deployments(items)

    async def _deployment_event(self, kind: str, obj: Obj) -> None:
        self.model.deployment_event(kind, obj)

    async def _publish(self, kind: str, resource: str, events: list[TaskEvent]) -> None:
        if not events:
            return
        with tracer.start_as_current_span(names.SPAN_WATCHER_EVENT, kind=SpanKind.PRODUCER) as span:
            span.set_attribute(names.K8S_RESOURCE, resource)
            span.set_attribute(names.K8S_WATCH_EVENT, kind)
            span.set_attribute(names.K8S_EVENTS_EMITTED, len(events))
            if len(events) == 1:
                span.set_attribute(names.TASK_ID, events[0].task_id)
            for ev in events:
                await self.producer.send(TASKEVENTS, ev.task_id, ev)
        self.task_events_sent += len(events)

    # ------------------------------------------------------------------ cluster state

    async def _state_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.publish_states()
            await pause(stop, self.settings.state_interval_s)

    async def publish_states(self) -> int:
        """Send the states that changed (or are due a heartbeat); returns how many were sent."""
        if not self.synced():
            return 0
        now = self.now_ms()
        states = self.model.cluster_states(now)
        for gone in [ns for ns in self._last if ns not in states]:
            empty = self.model.namespace_state(gone, [], [], 0, now)
            await self._send_state(gone, empty.model_copy(update={"nodes_total": len(self.model.nodes)}))
            del self._last[gone]
        sent = 0
        heartbeat_ms = self.settings.heartbeat_s * 1000
        for ns, state in states.items():
            fingerprint = orjson.dumps(state.model_dump(mode="json", exclude={"ts_ms", "oldest_pending_s"}))
            last = self._last.get(ns)
            if last is not None and last[0] == fingerprint and now - last[1] < heartbeat_ms:
                continue
            await self._send_state(ns, state)
            self._last[ns] = (fingerprint, now)
            sent += 1
        self.model.dirty.clear()
        await self.producer.flush()
        return sent

    async def _send_state(self, ns: ClusterKey, state: ClusterState) -> None:
        with tracer.start_as_current_span(names.SPAN_WATCHER_STATE, kind=SpanKind.PRODUCER) as span:
            span.set_attribute(names.K8S_NAMESPACE, ns or "")
            await self.producer.send(CLUSTERSTATE, self.model.state_key(ns), state)
        self.states_sent += 1


async def body(settings: WatcherSettings, stop: asyncio.Event, health: HealthServer) -> None:
    from services.cluster_watcher.kube import KubeSource
    from services.runtime.kube_client import api_client

    api = await api_client(settings.kubeconfig)
    producer = Producer(
        bootstrap=settings.kafka_bootstrap, client_id="cluster-watcher", topic_prefix=settings.topic_prefix
    )
    await producer.start()
    try:
        watcher = Watcher(settings, KubeSource(api, settings.namespace), producer)
        health.add_check("synced", watcher.synced)
        await watcher.run(stop)
    finally:
        await producer.stop()
        await api.close()


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (WATCHER_*)
    return run_service("cluster-watcher", WatcherSettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
