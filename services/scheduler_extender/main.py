"""`borgctl serve scheduler-extender`: the kube-scheduler HTTP extender (configured by EXTENDER_* variables).

With ``EXTENDER_POLICY=learned`` the learned placement Q-table (``EXTENDER_PLACEMENT_MODEL_DIR``, its
``CURRENT`` re-read every ``MODEL_POLL_S`` seconds) scores every prioritize call in shadow beside the
heuristic, which still answers. With ``EXTENDER_WEIGHT_CORUNNER`` > 0 the classes of the pods bound to each
node enter its scores (the co-runner term); with ``EXTENDER_LOAD_TERM=true`` too, their per-pod pressure
estimates from podpressure.v1 (the load term). Either needs list/watch on Pods and Nodes
(``EXTENDER_KUBECONFIG``, else KUBECONFIG or the pod's ServiceAccount). A model that cannot be loaded at
start-up exits 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from pathlib import Path

from featurelib.placement import TABLE_FILE, PlacementModel
from services.runtime.health import HealthServer
from services.runtime.model_watch import ModelRefusedError, ModelWatcher
from services.runtime.pause import pause
from services.runtime.service import serve_main
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.pressures import PressureBook
from services.scheduler_extender.reader import StateReader
from services.scheduler_extender.residents import LoadFollower, follow_pods
from services.scheduler_extender.scoring import ScoringConfig
from services.scheduler_extender.server import ExtenderServer
from services.scheduler_extender.settings import ExtenderSettings
from services.scheduler_extender.shadow import Shadow
from services.scheduler_extender.state import NodeStateStore

log = logging.getLogger(__name__)
SWEEP_S = 1.0
FORGET_S = 60.0


def scoring_config(s: ExtenderSettings) -> ScoringConfig:
    return ScoringConfig(
        max_slowdown=s.max_slowdown,
        min_confidence=s.min_confidence,
        anomaly_threshold=s.anomaly_threshold,
        risk_threshold=s.risk_threshold,
        risk_horizon_s=s.risk_horizon_s,
        staleness_ms=int(s.staleness_s * 1000),
        weight_slowdown=s.weight_slowdown,
        weight_risk=s.weight_risk,
        weight_anomaly=s.weight_anomaly,
        unknown_penalty=s.unknown_penalty,
        weight_forecast=s.weight_forecast,
        forecast_horizon_s=s.forecast_horizon_s,
        forecast_busy=s.forecast_busy,
        forecast_saturated=s.forecast_saturated,
        forecast_staleness_ms=int(s.forecast_staleness_s * 1000),
        weight_corunner=s.weight_corunner,
        score_confidence=s.score_confidence,
        corunner_slo_slowdown=s.corunner_slo_slowdown,
        latency_sensitive_classes=tuple(s.latency_sensitive_classes),
    )


def build(
    settings: ExtenderSettings, index: PodIndex | None = None
) -> tuple[Extender, ExtenderServer, StateReader]:
    """The extender's parts, wired but not started (tests and the benchmark use this too). With the load term
    and a pod ``index``, the reader hands podpressure.v1 to the store's ``LoadFollower`` (``reader.loads``)."""
    store = NodeStateStore(scoring_config(settings))
    loads = None
    if settings.load_term and index is not None:
        loads = LoadFollower(store, index, PressureBook(int(settings.pressure_max_age_s * 1000)))
    extender = Extender(store, class_key=settings.class_key, default_class=settings.default_class)
    server = ExtenderServer(
        extender,
        host=settings.host,
        port=settings.port,
        prefix=settings.path_prefix,
        span_detail_max_nodes=settings.span_detail_max_nodes,
    )
    reader = StateReader(
        bootstrap=settings.kafka_bootstrap,
        store=store,
        topic_prefix=settings.topic_prefix,
        on_pressure=loads.estimate if loads is not None else None,
        pressure_lookback_ms=int(settings.pressure_max_age_s * 1000),
    )
    reader.loads = loads
    return extender, server, reader


async def sweep(
    store: NodeStateStore, stop: asyncio.Event, loads: LoadFollower | None = None, recheck_s: float = 5.0
) -> None:
    """Recompute cards whose inputs went stale, off the request path; renumber node ids once most are gone;
    with the load term, re-read every node's per-pod estimates every ``recheck_s``."""
    last_compact = last_recheck = time.monotonic()
    while not stop.is_set():
        await pause(stop, SWEEP_S)
        store.refresh_expired(int(time.time() * 1000))
        if loads is not None and time.monotonic() - last_recheck >= recheck_s:
            last_recheck = time.monotonic()
            await loads.recheck_sliced()
        if time.monotonic() - last_compact >= FORGET_S:
            last_compact = time.monotonic()
            if store.compact_ids():
                log.info("node ids renumbered: %d held", len(store.node_ids))


async def freeze_after_catch_up(reader: StateReader, *loaded: asyncio.Event) -> None:
    """Move what exists once the state is loaded (libraries, settings, server) out of the cyclic GC's sight.

    A full collection then walks only objects made later; the per-node state itself is plain tuples the
    collector untracks (see state.py). Both keep collector pauses off the scheduler's calls. ``loaded``: more
    state to wait for (the learned shadow's pods/nodes lists: ~10 dicts and tuples per pod at 5,000 nodes,
    which a full collection would otherwise walk, landing a pause in a shadow slice or on an answer).
    """
    await reader.caught_up.wait()
    for event in loaded:
        await event.wait()
    gc.collect()
    gc.freeze()
    log.info("gc: %d objects frozen after the state catch-up", gc.get_freeze_count())


def load_placement(version_dir: Path) -> PlacementModel:
    """A placement model version for the ModelWatcher (refused, not crashed, when unreadable)."""
    try:
        model = PlacementModel.from_json((version_dir / TABLE_FILE).read_bytes())
        model.default  # noqa: B018 (the unseen-state Q, a mean over the table: computed here, not in a shadow slice)
        return model
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelRefusedError(f"{version_dir / TABLE_FILE}: not a usable placement Q-table ({exc})") from None


async def start_pod_watch(
    settings: ExtenderSettings, index: PodIndex, stop: asyncio.Event
) -> tuple[asyncio.Task[None], asyncio.Event]:
    """The pods/nodes watch feeding ``index`` (learned shadow, co-runner term); its task, and the event set
    once it has listed pods and nodes."""
    from services.runtime.kube_client import api_client
    from services.scheduler_extender.kube import ClusterWatch

    api = await api_client(settings.kubeconfig)
    watch = ClusterWatch(api, index)

    async def run_watch(stop: asyncio.Event) -> None:
        try:
            await watch.run(stop)
        finally:
            await api.close()

    return asyncio.create_task(run_watch(stop), name="cluster-watch"), watch.synced


def start_shadow(
    settings: ExtenderSettings,
    extender: Extender,
    server: ExtenderServer,
    index: PodIndex,
    synced: asyncio.Event,
    stop: asyncio.Event,
) -> list[asyncio.Task[None]]:
    """The learned policy in shadow: its model (hot reloaded) and the server's hook; the model's task."""
    models: ModelWatcher[PlacementModel] = ModelWatcher(
        "placement", settings.placement_model_dir, load_placement, poll_s=settings.model_poll_s
    )
    shadow = Shadow(
        extender.store,
        index,
        lambda: models.current,
        staleness_ms=int(settings.staleness_s * 1000),
        keep=settings.shadow_keep,
        log_per_min=settings.shadow_log_per_min,
    )
    server.shadow, server.shadow_version = shadow, lambda: models.version_dir.name
    # not a readiness check: the heuristic answers whether or not the shadow's watch is synced
    shadow.synced = synced.is_set
    log.info("policy learned (shadow): model %s; the heuristic answers every call", models.version_dir.name)
    return [asyncio.create_task(models.run(stop), name="placement-model")]


async def body(settings: ExtenderSettings, stop: asyncio.Event, health: HealthServer) -> None:
    index: PodIndex | None = None
    if settings.policy == "learned" or settings.weight_corunner > 0:
        index = PodIndex(class_key=settings.class_key, default_class=settings.default_class)
    extender, server, reader = build(settings, index)
    health.add_check("http", lambda: server.running)
    health.add_check("state_caught_up", reader.caught_up.is_set)
    shadow_tasks: list[asyncio.Task[None]] = []
    loaded: list[asyncio.Event] = []
    if index is not None:
        if settings.load_term:
            log.info("load term on (weight %.2f): pods/nodes watched, podpressure.v1 read (estimates kept %.0f s)",
                     settings.weight_corunner, settings.pressure_max_age_s)
        elif settings.weight_corunner > 0:
            # not a readiness check either: until the watch has listed, nodes score as without the term
            follow_pods(extender.store, index)
            log.info("co-runner term on (weight %.2f): pods/nodes watched", settings.weight_corunner)
        watch_task, synced = await start_pod_watch(settings, index, stop)
        shadow_tasks.append(watch_task)
        loaded.append(synced)
        if settings.policy == "learned":
            shadow_tasks += start_shadow(settings, extender, server, index, synced, stop)
    await server.start()
    tasks = [
        asyncio.create_task(reader.run(stop), name="state-reader"),
        asyncio.create_task(sweep(extender.store, stop, reader.loads, settings.load_recheck_s), name="sweeper"),
        *shadow_tasks,
    ]
    freezer = asyncio.create_task(freeze_after_catch_up(reader, *loaded), name="gc-freeze")
    try:
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for task in done - {stopper}:
            task.result()  # a crashed reader/sweeper crashes the service (its supervisor restarts it)
    finally:
        stop.set()
        freezer.cancel()
        await server.stop()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, timeout=5)


def main(argv: list[str] | None = None) -> int:
    # configured by environment (EXTENDER_* plus the common KAFKA_BOOTSTRAP, BORG_TOPIC_PREFIX, ...)
    return serve_main("scheduler-extender", __doc__, ExtenderSettings, body, argv or [], refused=ModelRefusedError)


if __name__ == "__main__":
    raise SystemExit(main([]))
