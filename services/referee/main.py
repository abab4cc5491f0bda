"""`borgctl serve referee`: proposals.v1 → decisions.v1 + actions.v1, applied to Kubernetes per REFEREE_MODE."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Gauge

from contracts.topics import Topic
from services.referee.loop import Referee
from services.referee.settings import RefereeSettings
from services.runtime.health import HealthServer
from services.runtime.service import run_service
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)
LEADER = Gauge("borg_referee_leader", "1 while this referee holds the leader-election Lease (or runs without one)")


async def body(settings: RefereeSettings, stop: asyncio.Event, health: HealthServer) -> None:
    if not settings.leader_election:
        LEADER.set(1)
        await serve(settings, stop, health)
        return
    from services.referee.actuator import kube_call
    from services.referee.lease import LeaseElector
    from services.runtime.kube_client import api_client

    api = await api_client(settings.kubeconfig)
    elector = LeaseElector(kube_call(api, settings.request_timeout_s), name=settings.lease_name,
                           namespace=settings.lease_namespace, identity=settings.identity,
                           lease_duration_s=settings.lease_duration_s, renew_deadline_s=settings.renew_deadline_s,
                           retry_period_s=settings.retry_period_s)
    campaign_stop = asyncio.Event()
    campaign = asyncio.create_task(elector.run(campaign_stop), name="leader election")
    LEADER.set(0)
    try:
        log.info("referee %s: standby until it holds lease %s/%s", settings.identity, settings.lease_namespace,
                 settings.lease_name)
        if not await _first(elector.leading, stop, elector.lost):
            return
        LEADER.set(1)
        # the referee stops on either: the process is told to, or the lease is gone
        serving_stop = asyncio.Event()
        relay = asyncio.create_task(_relay(serving_stop, stop, elector.lost))
        try:
            await serve(settings, serving_stop, health)
        finally:
            relay.cancel()
        if elector.lost.is_set():
            # exit non-zero: the restarted process campaigns again as a standby
            raise SystemExit("referee: leadership lost; exiting so the restart campaigns as a standby")
    finally:
        LEADER.set(0)
        campaign_stop.set()
        await asyncio.gather(campaign, return_exceptions=True)
        await api.close()


async def _first(wanted: asyncio.Event, *others: asyncio.Event) -> bool:
    """Wait until ``wanted`` or one of ``others`` is set; True when ``wanted`` is."""
    waiters = [asyncio.create_task(e.wait()) for e in (wanted, *others)]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    return wanted.is_set() and not any(e.is_set() for e in others)


async def _relay(target: asyncio.Event, *sources: asyncio.Event) -> None:
    await _first(*sources)
    target.set()


async def serve(settings: RefereeSettings, stop: asyncio.Event, health: HealthServer) -> None:
    sink = Sink(bootstrap=settings.kafka_bootstrap, service="referee", topic_prefix=settings.topic_prefix,
                producer_spans=True)
    await sink.start()
    actuator = None
    try:
        if settings.mode != "shadow":
            from services.referee.actuator import KubeActuator

            actuator = await KubeActuator.connect(settings)
        referee = Referee(settings, sink, actuator)
        health.add_check("kafka", referee.is_ready)
        health.add_liveness("kafka", referee.stream().progress.check)
        log.info("referee in %s mode (window %d ms)", settings.mode, settings.window_ms)
        feed = None
        if actuator is not None:
            from services.referee.capabilities_feed import publish_capabilities

            feed = asyncio.create_task(publish_capabilities(
                actuator, sink, cluster=settings.cluster, reporter=settings.identity,
                refresh_s=settings.capabilities_refresh_s, stop=stop), name=Topic.CAPABILITIES)
        try:
            await referee.run(stop)
        finally:
            if feed is not None:
                feed.cancel()
                await asyncio.gather(feed, return_exceptions=True)
    finally:
        await sink.stop()
        if actuator is not None:
            await actuator.close()


def main(argv: list[str] | None = None) -> int:
    del argv  # configured by environment (REFEREE_*)
    return run_service("referee", RefereeSettings, body)


if __name__ == "__main__":
    raise SystemExit(main([]))
