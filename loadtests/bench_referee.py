"""`borgctl bench referee`: decisions/s and proposal→ActionResult latency against the local API server.

An in-process Referee consumes proposals.v1 from a fresh topic namespace per case while
this module offers proposals at a fixed rate and reads actions.v1 back. Latency is the
time from a proposal's send (its ``ts_ms``) to the moment its ActionResult is read back
from Kafka (window included: ``window_ms`` = 50 here). Cases:

- ``shadow``: decide and record only (Kafka + referee overhead, no API calls);
- ``dry-run-scale``: server-side dry-run scale of a Deployment (GET, 2 PATCH dryRun, Event);
- ``apply-scale``: real scale subresource writes + annotation + Event (pods stay unscheduled).

Each case gets 40 fresh Deployments (replicas 0); proposal i asks Deployment i % 40 for
1 + (i // 40) % 3 replicas, so consecutive decisions on a target always change something.

Guards are opened wide (no cooldown, no rate limit) so the numbers measure the machinery.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from contracts import decode
from contracts.models import ActionResult, Decision, Proposal, TargetRef
from contracts.topics import Topic
from services.referee.loop import Referee
from services.referee.settings import RefereeSettings
from services.runtime.admin import create_topics
from services.runtime.kafka_security import kafka_client_options
from services.runtime.producer import Producer
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)
Row = dict[str, Any]
DEPLOYMENTS = 40


def default_kubeconfig() -> str:
    for var in ("REFEREE_KUBECONFIG", "KUBECONFIG"):
        if os.environ.get(var):
            return os.environ[var]
    cache = Path(os.environ.get("BORG_CACHE", Path.home() / ".cache" / "borg-orchestrator"))
    state = Path(os.environ.get("BORG_STATE", cache / "state"))
    return str(state / "kube" / "admin.kubeconfig")


def _deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"borg-orchestrator.io/bench": "referee"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "borg-bench-nowhere"},
                    "containers": [{"name": "app", "image": "registry.invalid/bench:1"}],
                },
            },
        },
    }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _case(
    case: str, mode: str, rate: int, seconds: float, bootstrap: str, kubeconfig: str, ns: str, group: str
) -> list[Row]:
    prefix = f"bench{uuid.uuid4().hex[:8]}-"
    await create_topics(bootstrap, prefix=prefix)
    s = RefereeSettings(
        KAFKA_BOOTSTRAP=bootstrap,
        BORG_TOPIC_PREFIX=prefix,
        mode=mode,
        window_ms=50,
        cooldown_s=0,  # type: ignore[arg-type]
        hysteresis_s=0,
        rate_limit_per_min=0,
        max_disruptions=1_000_000,
        min_replicas=0,
        max_replicas=50,
        kubeconfig=kubeconfig,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        min_score=0.0,
    )
    sink = Sink(bootstrap=bootstrap, service="bench-referee", topic_prefix=prefix)
    await sink.start()
    actuator = None
    if mode != "shadow":
        from services.referee.actuator import KubeActuator

        actuator = await KubeActuator.connect(s)
    referee = Referee(s, sink, actuator)
    stop = asyncio.Event()
    runner = asyncio.create_task(referee.run(stop))
    consumer = AIOKafkaConsumer(
        f"{prefix}decisions.v1",
        f"{prefix}actions.v1",
        bootstrap_servers=bootstrap, **kafka_client_options(),
        group_id=None,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    sent_at: dict[str, float] = {}
    decided: dict[str, list[str]] = {}
    latencies: list[float] = []
    results = 0
    total = int(rate * seconds)
    source = Producer(bootstrap=bootstrap, client_id="bench-agents", topic_prefix=prefix)
    await source.start()

    async def offer() -> None:
        start = time.perf_counter()
        for i in range(total):
            target = TargetRef(kind="Deployment", name=f"{group}-{i % DEPLOYMENTS}", namespace=ns)
            p = Proposal(
                proposal_id=f"bench-{uuid.uuid4().hex[:16]}",
                agent="reliability",
                kind="scale_out",
                target=target,
                payload={"replicas": 1 + (i // DEPLOYMENTS) % 3},
                score=0.9,
                ts_ms=int(time.time() * 1000),
            )
            sent_at[p.proposal_id] = time.perf_counter()
            await source.send(Topic.PROPOSALS, target.key(), p)
            delay = start + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await source.flush()

    began = time.perf_counter()
    offering = asyncio.create_task(offer())
    deadline = began + seconds + 30
    last = began
    try:
        while time.perf_counter() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            now = time.perf_counter()
            for records in batch.values():
                for r in records:
                    if r.topic.endswith(Topic.DECISIONS):
                        d = decode(Decision, r.value)
                        decided[d.decision_id] = [p.proposal_id for p in d.proposals]
                        continue
                    result = decode(ActionResult, r.value)
                    results += 1
                    last = now
                    for pid in decided.get(result.decision_id, []):
                        if pid in sent_at:
                            latencies.append((now - sent_at.pop(pid)) * 1000.0)
            if offering.done() and not sent_at:
                break
    finally:
        await offering
        stop.set()
        await runner
        await consumer.stop()
        await source.stop()
        await sink.stop()
        if actuator is not None:
            await actuator.close()
    elapsed = max(1e-6, last - began)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(referee.stats.outcomes.items()))
    log.info("%s at %d/s: %d proposals, %d results (%s)", case, rate, total, results, outcomes)
    base = {"bench": "referee", "case": case, "offered": rate}
    return [
        {**base, "metric": "throughput", "value": round(results / elapsed, 1), "unit": "decisions/s"},
        {**base, "metric": "latency_p50", "value": round(_percentile(latencies, 0.50), 1), "unit": "ms"},
        {**base, "metric": "latency_p99", "value": round(_percentile(latencies, 0.99), 1), "unit": "ms"},
    ]


async def _bench(quick: bool, bootstrap: str, kubeconfig: str) -> list[Row]:
    from services.referee.actuator import KubeActuator, wait_ready

    admin = await KubeActuator.connect(RefereeSettings(kubeconfig=kubeconfig))
    ns = f"borg-bench-{uuid.uuid4().hex[:6]}"
    try:
        await wait_ready(admin.api)
        await admin.raw(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        rates = [50] if quick else [25, 100, 200]
        seconds = 4.0 if quick else 10.0
        rows: list[Row] = []
        for n, (rate, (case, mode)) in enumerate(
            (r, c)
            for r in rates
            for c in (("shadow", "shadow"), ("dry-run-scale", "dry-run"), ("apply-scale", "apply"))
        ):
            group = f"b{n}"  # fresh Deployments per case (replicas 0), so every proposal asks for a change
            if mode != "shadow":
                for i in range(DEPLOYMENTS):
                    await admin.raw("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment(f"{group}-{i}"))
            rows += await _case(case, mode, rate, seconds, bootstrap, kubeconfig, ns, group)
        return rows
    finally:
        try:
            await admin.raw("DELETE", f"/api/v1/namespaces/{ns}")
        except Exception as exc:  # clean-up is best effort: the numbers are already in hand
            log.warning("could not delete bench namespace %s: %s", ns, exc)
        finally:
            await admin.close()


def run_referee_bench(quick: bool, bootstrap: str, kubeconfig: str | None = None) -> list[Row]:
    """Rows {"bench": "referee", "case", "offered", "metric", "value", "unit"} (plus outcome counts)."""
    return asyncio.run(_bench(quick, bootstrap, kubeconfig or default_kubeconfig()))


if __name__ == "__main__":
    import json
    import sys

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    logging.getLogger("services.referee.actuator").setLevel(logging.ERROR)
    for row in run_referee_bench("--quick" in sys.argv, os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")):
        print(json.dumps(row))
