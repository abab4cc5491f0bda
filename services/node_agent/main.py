"""`borgctl serve node-agent`: sample this node (or a synthetic cluster) into nodestate.v1."""

from __future__ import annotations

import asyncio
import logging

from services.node_agent.agent import LiveSource, NodeAgent, Source
from services.node_agent.live import DEFAULT_CGROUP_EVENTS, DEFAULT_EVENTS, LiveSampler
from services.node_agent.nodestate import TOPIC
from services.node_agent.publish import BatchingProducer, pick_compression
from services.node_agent.settings import NodeAgentSettings, split_list
from services.node_agent.shipper import Shipper
from services.node_agent.spool import Spool
from services.runtime.health import HealthServer
from services.runtime.service import run_service

log = logging.getLogger(__name__)
SERVICE = "node-agent"


def build_source(settings: NodeAgentSettings) -> Source:
    if settings.source == "synthetic":
        from services.node_agent.synthetic import SyntheticSource

        return SyntheticSource(
            node=settings.node,
            nodes=settings.synthetic_nodes,
            seed=settings.synthetic_seed,
            interval_ms=max(1, round(settings.interval_s * 1000)),
            truth_path=settings.ground_truth_path,
        )
    sampler = LiveSampler(
        events=split_list(settings.events) or DEFAULT_EVENTS,
        raw_events=split_list(settings.raw_events),
        sysfs_root=settings.sysfs_root,
        proc_root=settings.proc_root,
        cgroup_root=settings.cgroup_root,
        cgroup_depth=settings.cgroup_depth,
        cgroup_max=settings.cgroup_max,
        cgroup_events=split_list(settings.cgroup_events) or DEFAULT_CGROUP_EVENTS,
        record_freq=settings.record_cpu_freq,
        resctrl_root=settings.resctrl_root,
        membw_peak_bytes_per_s=settings.membw_peak_gbps * 1e9 if settings.membw_peak_gbps is not None else None,
    )
    return LiveSource(settings.node, sampler)


def build_agent(settings: NodeAgentSettings) -> NodeAgent:
    spool = Spool(
        settings.spool_dir,
        max_bytes=settings.spool_max_bytes,
        segment_bytes=settings.spool_segment_bytes,
        fsync=settings.spool_fsync,
    )
    compression = pick_compression(settings.compression)
    timeout_ms = round(settings.delivery_timeout_s * 1000)

    def producer() -> BatchingProducer:
        return BatchingProducer(
            bootstrap=settings.kafka_bootstrap,
            client_id=f"{SERVICE}-{settings.node}",
            topic_prefix=settings.topic_prefix,
            compression=compression,
            linger_ms=5,
            request_timeout_ms=timeout_ms,
        )

    shipper = Shipper(
        spool,
        producer,
        TOPIC,
        batch_records=settings.batch_records,
        attempt_timeout_s=2 * settings.delivery_timeout_s + 1.0,
        backoff_s=(min(0.2, settings.retry_backoff_max_s), settings.retry_backoff_max_s),
    )
    return NodeAgent(
        source=build_source(settings),
        spool=spool,
        shipper=shipper,
        interval_s=settings.interval_s,
        validate=settings.validate_samples,
    )


async def serve(settings: NodeAgentSettings, stop: asyncio.Event, health: HealthServer) -> None:
    agent = build_agent(settings)
    health.add_check("sampling", agent.healthy)
    log.info(
        "node agent %s: source=%s interval=%.3fs spool=%s (max %d bytes) topic=%s%s",
        settings.node,
        settings.source,
        settings.interval_s,
        settings.spool_dir,
        settings.spool_max_bytes,
        settings.topic_prefix,
        TOPIC,
    )
    await agent.run(stop)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("Configuration: NODE_AGENT_* environment variables (see docs/node_agent.md).")
        return 0
    return run_service(SERVICE, NodeAgentSettings, serve)
