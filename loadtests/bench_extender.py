"""`borgctl bench extender`: latency of the extender's prioritize path for 100, 1,000 and 5,000 candidate nodes.

Cases (rows in the project's benchmark format, times in ms):

- ``nodes=N`` — the prioritize handler in-process: request bytes (``ExtenderArgs`` with ``NodeNames`` only,
  a realistic Pod) → parse → score → ``HostPriorityList`` bytes. This is the path the 5 ms p99 target is for.
  Also ``cpu_p50``/``cpu_p99``: CPU time of the thread for the same calls (excludes time the OS gave to other
  processes, which dominates wall-clock tails on a busy 2-core machine).
- ``nodes=N,path=score`` — the pure scoring function alone on already-parsed names.
- ``nodes=N,verb=filter`` — the filter handler in-process (10 % of nodes severe for the pod's class).
- ``nodes=N,policy=learned`` — ``EXTENDER_POLICY=learned`` as the scheduler experiences it: prioritize calls
  issued back to back through the server's handler on one event loop, in-process, with the shadow's worker
  scoring them as the service runs it (in slices, giving way to calls being answered). Each call first lets
  the loop run what is ready (the slice of shadow work under way when the call arrives), then is answered;
  timed from arrival to answer (wall, and ``cpu_*`` the thread's CPU, which includes that slice). Calls come
  faster than the shadow finishes, so most are replaced before being scored: ``shadow_scored_share`` is the
  share scored. (Until issue 22's latency work this row was prioritize + a whole shadow back to back.)
- ``nodes=N,policy=learned,path=shadow`` — the shadow's own cost per call (wall and CPU, all its slices, none
  of the waits between), cache warm, after a prioritize (untimed) so the candidate list is freshly parsed as
  in the service. ``...,path=shadow-churn``: 5 % of the candidates got a new regime label since the previous
  call (the store's update untimed); ``...,path=shadow-reload``: another model object before every call (a
  hot reload: every Q looked up again, each node's key parts kept); ``...,path=shadow-cold``: every node's
  key parts forgotten before every call (as if every node changed: the worst case).
- ``nodes=5000,policy=learned,path=slice`` — CPU of each slice of shadow work over the four cases above at
  5,000 nodes (p50, p99, p100 = the largest): what an answer arriving during shadow work can wait for.
  The shipped model (``models/placement``); every node 16 cores with 0–8 pods.
- ``nodes=N,path=http`` — a full HTTP round trip over loopback to the extender's aiohttp server running in
  a separate process (like kube-scheduler → extender), keep-alive connection, client in this process.
  ``nodes=N,path=http,policy=learned``: the same server with the learned shadow on (back-to-back calls wait
  for at most the slice of shadow work under way).

State: 90 % of the candidates have fresh regime/anomaly/risk, 5 % stale, 5 % unknown (not held); the
extender's clock stands still during the run so that mix holds for every row (before, the fresh labels
turned stale two minutes in, while the later rows ran).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import orjson
from aiohttp import web

from contracts.models import WORKLOAD_CLASSES, AnomalyScore, FailureRiskV2, HorizonRisk, RegimeLabelV2, RegimeName
from featurelib.placement import PlacementModel, load_placement_model
from loadtests.arena_live.kube import stop_process
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.podindex import PodIndex
from services.scheduler_extender.scoring import CLASS_INDEX, ScoringConfig
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY, PROJECT_ROOT
from services.scheduler_extender.shadow import Shadow
from services.scheduler_extender.state import NodeStateStore

SIZES = (100, 1_000, 5_000)
BENCH = "extender"
POD_CLASS = "memory_bound"
REGIMES: tuple[RegimeName, ...] = ("none", "llc", "membw", "core", "mixed")


def node_name(i: int) -> str:
    return f"bench-node-{i:05d}.pool-a.cluster.local"


def synthetic_store(nodes: int, now_ms: int, seed: int = 7) -> NodeStateStore:
    """State for `nodes` nodes: 90 % fresh, 5 % stale, 5 % never seen (10 % severe for memory_bound)."""
    rnd = random.Random(seed)
    store = NodeStateStore(ScoringConfig())
    stale_ms = store.cfg.staleness_ms + 60_000
    for i in range(nodes):
        if i % 20 == 19:
            continue  # unknown
        ts = now_ms - (stale_ms if i % 20 == 18 else rnd.randrange(0, 30_000))
        name = node_name(i)
        store.apply(regime_label(name, ts, rnd, severe=i % 10 == 3), now_ms)
        store.apply(
            AnomalyScore(
                node=name,
                ts_ms=ts,
                score=rnd.random() * 0.6,
                is_anomaly=False,
                threshold=0.9,
                model_version="bench",
                input_ts_ms=ts,
            ),
            now_ms,
        )
        store.apply(
            FailureRiskV2(
                target_kind="node",
                target=name,
                ts_ms=ts,
                model_version="bench",
                input_ts_ms=ts,
                horizons=[HorizonRisk(horizon_s=h, probability=rnd.random() * 0.4) for h in (600, 3600)],
            ),
            now_ms,
        )
    return store


def regime_label(name: str, ts_ms: int, rnd: random.Random, *, severe: bool = False) -> RegimeLabelV2:
    """A regime label with random interference (severe: over the SLO for memory_bound)."""
    regime = "membw" if severe else rnd.choice(REGIMES)
    interference = {c: round(1.0 + rnd.random() * 0.4, 3) for c in WORKLOAD_CLASSES}
    if severe:
        interference[POD_CLASS] = 2.0 + rnd.random()
    return RegimeLabelV2(
        node=name,
        ts_ms=ts_ms,
        regime=regime,
        confidence=0.6 + rnd.random() * 0.4,
        raw_regime=regime,
        changed=False,
        interference=interference,
        model_version="bench",
        input_ts_ms=ts_ms,
    )


def pod_json(name: str = "bench-pod", workload_class: str = POD_CLASS) -> dict[str, Any]:
    """A Pod as kube-scheduler serializes it into ExtenderArgs (status and managed fields included)."""
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": "6f1c1d1e-0000-4000-8000-000000000001",
            "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "bench", DEFAULT_CLASS_KEY: workload_class},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "bench-7d9f",
                    "uid": "6f1c1d1e-0000-4000-8000-000000000002",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                }
            ],
            "restartPolicy": "Always",
            "schedulerName": "borg-orchestrator",
            "priority": 0,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def args_body(names: list[str], workload_class: str = POD_CLASS) -> bytes:
    return orjson.dumps({"Pod": pod_json(workload_class=workload_class), "Nodes": None, "NodeNames": names})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def measure(call: Callable[[], object], iterations: int, warmup: int = 20) -> tuple[list[float], list[float]]:
    """Wall-clock and thread-CPU milliseconds per call."""
    for _ in range(warmup):
        call()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(iterations):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        call()
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        wall.append((w1 - w0) / 1e6)
        cpu.append((c1 - c0) / 1e6)
    return wall, cpu


def rows(
    case: str, values: list[float], metric: str = "latency", quantiles: tuple[int, ...] = (50, 99)
) -> list[dict[str, Any]]:
    return [
        {
            "bench": BENCH,
            "case": case,
            "metric": f"{metric}_p{q}",
            "value": round(percentile(values, q), 4),
            "unit": "ms",
        }
        for q in quantiles
    ]


# ---------------------------------------------------------------- HTTP server in a child process


async def _serve(nodes: int, policy: str = "heuristic") -> None:
    from services.scheduler_extender.server import ExtenderServer

    now_ms = int(time.time() * 1000)
    store = synthetic_store(nodes, now_ms)
    # the clock stands still: the state keeps its mix (fresh / stale / unknown) however long the run takes
    extender = Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=lambda: now_ms / 1000)
    shadow = synthetic_shadow(store, nodes) if policy == "learned" else None
    server = ExtenderServer(extender, host="127.0.0.1", port=0, shadow=shadow)
    await server.start()
    gc.collect()
    gc.freeze()  # as the service does once its state is loaded
    print(f"PORT {server.bound_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def _http_rows(iterations: int, policy: str = "heuristic") -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    suffix = "" if policy == "heuristic" else f",policy={policy}"
    child = subprocess.Popen(
        [sys.executable, "-m", "loadtests.bench_extender", "serve", "--nodes", str(max(SIZES)), "--policy", policy],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    out: list[dict[str, Any]] = []
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"extender bench server did not start (got {line!r})")
        conn = http.client.HTTPConnection("127.0.0.1", int(line.split()[1]), timeout=10)
        for n in SIZES:
            body = args_body([node_name(i) for i in range(n)])

            def call(body: bytes = body) -> None:
                conn.request("POST", "/prioritize", body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                if response.status != 200 or not data.startswith(b"["):
                    raise RuntimeError(f"prioritize answered {response.status}: {data[:200]!r}")

            wall, _ = measure(call, iterations)
            out += rows(f"nodes={n},path=http{suffix}", wall)
        conn.close()
    finally:
        stop_process(child, 10)
    return out


# ---------------------------------------------------------------- entry points


def run_extender_bench(quick: bool) -> list[dict[str, Any]]:
    """Rows for `borgctl bench extender` (the lead's harness writes them with the machine description)."""
    iterations = 300 if quick else 2000
    out: list[dict[str, Any]] = []
    now_ms = int(time.time() * 1000)
    store = synthetic_store(max(SIZES), now_ms)
    # the clock stands still: without it the fresh labels (0-30 s old) turn stale two minutes in, while the
    # later rows run, and those rows pay for re-evaluating cards and rebuilding learned key parts
    extender = Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=lambda: now_ms / 1000)
    ci = CLASS_INDEX[POD_CLASS]
    gc.collect()
    gc.freeze()  # as the service does once its state is loaded (undone below)
    try:
        out += _in_process_rows(store, extender, ci, now_ms, iterations)
        out += _shadow_rows(store, extender, iterations)
    finally:
        gc.unfreeze()
    out += _http_rows(iterations)
    out += _http_rows(iterations, "learned")
    return out


def synthetic_shadow(store: NodeStateStore, nodes: int, seed: int = 11) -> Shadow:
    """The learned shadow over ``store``: every node 16 cores / 64 GiB with 0-8 pods of random classes."""
    rnd = random.Random(seed)
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    index.replace_nodes(
        [{"metadata": {"name": node_name(i)}, "status": {"allocatable": capacity}} for i in range(nodes)]
    )
    pods = []
    for i in range(nodes):
        for j in range(rnd.randrange(9)):
            pods.append(
                {
                    "metadata": {
                        "name": f"p{i}-{j}",
                        "namespace": "bench",
                        "labels": {DEFAULT_CLASS_KEY: rnd.choice(WORKLOAD_CLASSES)},
                    },
                    "spec": {
                        "nodeName": node_name(i),
                        "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                    },
                    "status": {"phase": "Running"},
                }
            )
    index.replace_pods(pods)
    model = load_placement_model(PROJECT_ROOT / "models" / "placement")
    return Shadow(store, index, lambda: model, staleness_ms=store.cfg.staleness_ms, log_per_min=0)


def _shadow_rows(store: NodeStateStore, extender: Extender, iterations: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    shadow = synthetic_shadow(store, max(SIZES))
    gc.collect()
    gc.freeze()  # the pod index too, as the service does once the state and the pods/nodes lists are loaded
    model = shadow.model()
    assert model is not None
    slices: list[float] = []
    for n in SIZES:
        body = args_body([node_name(i) for i in range(n)])
        out += asyncio.run(_answers_with_shadow(extender, shadow, body, n, iterations))
        rnd = random.Random(n)

        def churn(n: int = n, rnd: random.Random = rnd) -> None:
            _relabel(store, rnd.sample(range(n), n // 20), rnd, int(extender.clock() * 1000))

        cases: dict[str, Callable[[], None]] = {
            "shadow": lambda: None,
            # 5 % of the candidates got a new regime label since the previous call (the store's update untimed)
            "shadow-churn": churn,
            # a model reload (another table object): every Q looked up again, key parts kept
            "shadow-reload": lambda: setattr(shadow, "model", _copy_of(model)),
            # every node's key parts forgotten (as if every node changed): the worst case
            "shadow-cold": shadow.scorer.reset,
        }
        for path, prepare in cases.items():
            runs = {"shadow-cold": max(20, iterations // 10), "shadow-churn": max(20, iterations // 4)}.get(
                path, iterations
            )
            wall, cpu, per_slice = _shadow_calls(extender, shadow, body, prepare, runs)
            shadow.model = lambda: model
            case = f"nodes={n},policy=learned,path={path}"
            out += rows(case, wall) + rows(case, cpu, metric="cpu")
            if n == max(SIZES):
                slices += per_slice
    out += rows(f"nodes={max(SIZES)},policy=learned,path=slice", slices, metric="cpu", quantiles=(50, 99, 100))
    return out


def _copy_of(model: PlacementModel) -> Callable[[], PlacementModel]:
    fresh = PlacementModel(model.features, model.values, model.counts, model.alpha_min)
    return lambda: fresh


def _relabel(store: NodeStateStore, nodes: list[int], rnd: random.Random, now_ms: int) -> None:
    for i in nodes:
        if i % 20 != 19:  # the never-seen nodes stay unknown
            store.apply(regime_label(node_name(i), now_ms, rnd, severe=i % 10 == 3), now_ms)


def _shadow_calls(
    extender: Extender, shadow: Shadow, body: bytes, prepare: Callable[[], None], runs: int
) -> tuple[list[float], list[float], list[float]]:
    """The shadow's own cost per prioritize call, as its worker runs it (in slices, without the waits between):
    wall and CPU per call, and the CPU of every slice (what an answer arriving meanwhile can wait for)."""
    wall: list[float] = []
    cpu: list[float] = []
    per_slice: list[float] = []
    for k in range(runs + 5):
        prepare()
        _, ex = extender.prioritize(body)  # untimed: a freshly parsed candidate list, as in the service
        steps = shadow.slices_of(ex)
        c0, w0, total = time.thread_time_ns(), time.perf_counter_ns(), 0
        while True:
            s0 = time.thread_time_ns()
            try:
                next(steps)
            except StopIteration:
                break
            finally:
                total += 1
                if k >= 5:
                    per_slice.append((time.thread_time_ns() - s0) / 1e6)
        if k >= 5:  # the first calls warm the caches
            wall.append((time.perf_counter_ns() - w0) / 1e6)
            cpu.append((time.thread_time_ns() - c0) / 1e6)
    return wall, cpu, per_slice


class _Request:
    """What the extender's handler reads of an aiohttp request."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.headers: dict[str, str] = {}

    async def read(self) -> bytes:
        return self.body


async def _answers_with_shadow(
    extender: Extender, shadow: Shadow, body: bytes, n: int, iterations: int
) -> list[dict[str, Any]]:
    """Prioritize calls back to back through the server's handler on one event loop, the shadow's worker
    scoring them as the service does: each call first lets the loop run what is ready (a slice of shadow work
    under way when the call arrives), then is answered. Time from arrival to answer, wall and thread CPU."""
    from services.scheduler_extender.server import ExtenderServer

    server = ExtenderServer(extender, host="127.0.0.1", port=0, shadow=shadow)
    (handle,) = [
        r.handler
        for r in server.app.router.routes()
        if r.method == "POST" and r.resource is not None and r.resource.canonical == "/prioritize"
    ]
    request = cast(web.Request, _Request(body))
    counts = dict(shadow.counts)
    wall: list[float] = []
    cpu: list[float] = []
    for k in range(iterations + 20):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        await asyncio.sleep(0)  # the call arrives: what the loop has ready runs first
        response = await handle(request)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        if response.status != 200:
            raise RuntimeError(f"prioritize answered {response.status}")
        if k >= 20:
            wall.append((w1 - w0) / 1e6)
            cpu.append((c1 - c0) / 1e6)
    await shadow.drained()
    case = f"nodes={n},policy=learned"
    scored = sum(shadow.counts[k] - counts[k] for k in ("true", "false"))
    share = {"bench": BENCH, "case": case, "metric": "shadow_scored_share", "unit": "ratio"}
    return [*rows(case, wall), *rows(case, cpu, metric="cpu"), {**share, "value": round(scored / (iterations + 20), 4)}]


def _in_process_rows(
    store: NodeStateStore, extender: Extender, ci: int, now_ms: int, iterations: int
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in SIZES:
        names = [node_name(i) for i in range(n)]
        body = args_body(names)
        wall, cpu = measure(lambda body=body: extender.prioritize(body), iterations)  # type: ignore[misc]
        out += rows(f"nodes={n}", wall) + rows(f"nodes={n}", cpu, metric="cpu")
        wall, _ = measure(lambda names=names: store.priorities(names, ci, now_ms), iterations)  # type: ignore[misc]
        out += rows(f"nodes={n},path=score", wall)
        wall, _ = measure(lambda body=body: extender.filter(body), iterations)  # type: ignore[misc]
        out += rows(f"nodes={n},verb=filter", wall)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_extender")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve synthetic state over HTTP (the benchmark's child process)")
    serve.add_argument("--nodes", type=int, default=max(SIZES))
    serve.add_argument("--policy", choices=("heuristic", "learned"), default="heuristic")
    run = sub.add_parser("run", help="run the benchmark and print the rows")
    run.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "serve":
        asyncio.run(_serve(args.nodes, args.policy))
        return 0
    for row in run_extender_bench(args.quick):
        print(orjson.dumps(row).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
