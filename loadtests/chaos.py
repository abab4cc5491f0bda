"""`borgctl load chaos`: a soak with faults injected in turn; nothing lost or applied twice, every fault recovered.

    borgctl load chaos [--quick] --out DIR [--rate 2000] [--recovery-bound-s 90] [--no-kube]

The run owns its broker and API server, so it can restart them without disturbing anyone:
a private Kafka (``infra/kafka/kafka.sh`` with its own ``BORG_STATE`` and ports) and a
second kube-apiserver on the local control plane's etcd (``loadtests/private_stack.py``;
the control plane must be up: ``bash infra/kube/kube.sh start``). It seeds the run's
nodes and a namespace, starts features, regime, anomaly, risk, the three agents, the
referee (``apply`` against the private API server) and cluster-watcher, drives a steady
NodeState load (``loadtests.driver``) and then, one fault at a time, each its own case:

* ``kill:<service>`` — SIGKILL of the service's process group, restarted at once (as a
  supervisor would); recovered when the new process is ready and its consumer group has
  committed past where it was at the kill with its lag back under the bound
  (``loadtests/chaos_rules.py``); the watcher: ready and a new clusterstate.v1 record.
* ``restart:kafka`` — ``kafka.sh stop`` + ``start`` on the same data; recovered when every
  group progressed and caught up again.
* ``restart:kube-apiserver`` — SIGTERM (SIGKILL after 10 s), start again on the same port and etcd; recovered
  when it is ready, the referee's group caught up and (when the run applied actions
  before) an action went through the API again.

A service that exits on its own during the faults is restarted the same way and counted
(``crashes``). After the last fault the load goes on for a flush phase, the run drains,
and every produced NodeState (node, seq) must be in a features window or a dead letter
(``loadtests/accounting.py``), every FeatureVector answered by regime and anomaly (or
dead-lettered), and no decision id may have two ``applied`` ActionResults on actions.v1.
Losses and duplicates are attributed to the fault they followed (chaos_rules).

Output in DIR: ``results.json`` (bench format: per case ``lost``, ``duplicate_actions``,
``recovery_s``), ``timeline.png`` (lag and throughput with the faults marked),
``timeline.json``, ``chaos.json`` (faults, losses, duplicates in detail), ``logs/``.
The bound counts from the kill for a service, from being back for the broker and the API
server (``Fault.bound_from``). Exit 0 only when nothing was lost or applied twice and every
fault recovered within the bound; 1 otherwise; 3 when the private broker could not start, 4 when the pipeline failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests import harness as harness_module
from loadtests.accounting import FLUSH_PHASE
from loadtests.chaos_faults import (
    APISERVER_GRACE_S,
    QUICK_APISERVER_GRACE_S,
    WATCHER,
    ChaosObserver,
    Controller,
    SupervisedPipeline,
    plan_faults,
    progress,
)
from loadtests.chaos_report import report
from loadtests.harness import Harness, RunConfig, RunData
from loadtests.harness_cli import EXIT_FAILED, EXIT_KAFKA, EXIT_USAGE, parse_env
from loadtests.load_plan import Phase, node_name, nodes_for
from loadtests.private_stack import PrivateApiserver, PrivateBroker, StackError
from loadtests.procs import PIPELINE, ServiceProc

HOP_S = 10
"""The features window hop: the flush phase must close one (as in the soak)."""
CHAOS_ENV = {
    # act on every proposal, at once, as often as the policy allows: more writes, more chances
    # to see one applied twice
    "REFEREE_MIN_SCORE": "0.05",
    "REFEREE_COOLDOWN_S": "5",
    "REFEREE_RATE_LIMIT_PER_MIN": "0",
    "REFEREE_MAX_DISRUPTIONS": "100000",
    "REFEREE_MODE": "apply",
    # the watcher's recovery is seen as a new clusterstate record: re-send unchanged state often
    "WATCHER_HEARTBEAT_S": "2",
}


# --- the cluster --------------------------------------------------------------------------------


@dataclass
class Seeded:
    namespace: str
    label: str


def seed_cluster(nodes: int, run_id: str) -> Seeded:
    """The run's nodes (sim-00000… as the driver names them) and a namespace with Deployments.

    The first few nodes get status (capacity, Ready) so the Deployments' pods are bound to
    them; all carry a label of the run, so teardown removes exactly these.
    """
    import json

    from loadtests import seed_cluster as seed

    label = f"borg-orchestrator.io/chaos-run={run_id}"
    namespace = f"chaos-{run_id}"
    docs: list[dict[str, Any]] = []
    for i in range(nodes):
        doc = seed.node(node_name(i))
        doc["metadata"]["labels"]["borg-orchestrator.io/chaos-run"] = run_id
        docs.append(doc)
    docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    seed.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    status = {"status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                         "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                         "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                         "message": "simulated node"}]}}
    for i in range(min(nodes, 8)):
        seed.kubectl("patch", "node", node_name(i), "--subresource=status", "--type=merge", "-p", json.dumps(status))
    workloads = [seed.deployment(namespace, n, r, w) for n, r, w in seed.DEPLOYMENTS]
    seed.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": workloads}))
    seed.mark_pods_ready(namespace, timeout_s=30.0)
    return Seeded(namespace, label)


def unseed_cluster(seeded: Seeded) -> None:
    from loadtests import seed_cluster as seed

    # the namespace first (no new pods can be made in a terminating namespace), then force its pods:
    # bound pods never finish a graceful deletion without kubelets, and would hold the namespace
    for args in (
        ("delete", "namespace", seeded.namespace, "--wait=false"),
        ("delete", "pods", "--all", "-n", seeded.namespace, "--force", "--grace-period=0", "--wait=false"),
        ("delete", "nodes", "-l", seeded.label, "--wait=false"),
    ):
        with contextlib.suppress(SystemExit):
            seed.kubectl(*args)


# --- the run ------------------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    chaos = sub.add_parser("chaos", help="steady load while every service, the broker and the API server fail in turn")
    chaos.add_argument("--out", type=Path, required=True, help="output directory (results.json, PNG, logs/)")
    chaos.add_argument("--quick", action="store_true", help="250 NodeState/s, short gaps: a run of ~4 minutes")
    chaos.add_argument("--rate", type=float, default=None, help="NodeState/s (default 2000; --quick 250)")
    chaos.add_argument("--interval-ms", type=int, default=1000, help="sampling interval of every simulated node")
    chaos.add_argument("--recovery-bound-s", type=float, default=None,
                       help="a fault not recovered within this fails the run (default 90; --quick 60)")
    chaos.add_argument("--gap-s", type=float, default=None,
                       help="steady load between faults (default 20; --quick 3)")
    chaos.add_argument("--warmup", type=float, default=None, help="seconds of load before the first fault")
    chaos.add_argument("--no-kube", action="store_true",
                       help="no Kubernetes: referee in shadow mode, no watcher, no API server restart")
    chaos.add_argument("--seed", type=int, default=0)
    chaos.add_argument("--ready-timeout", type=float, default=180.0, help="seconds for the services to become ready")
    chaos.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra env for every service")


@dataclass
class ChaosArgs:
    out: Path
    rate: float
    interval_ms: int
    recovery_bound_s: float
    gap_s: float
    warmup_s: float
    kube: bool
    seed: int
    ready_timeout_s: float
    env: dict[str, str]
    drain_s: float = 60.0
    apiserver_grace_s: float = APISERVER_GRACE_S

    @classmethod
    def parse(cls, args: argparse.Namespace) -> ChaosArgs:
        rate = args.rate if args.rate is not None else (250.0 if args.quick else 2000.0)
        if rate <= 0:
            raise ValueError("--rate must be > 0")
        return cls(
            out=args.out, rate=rate, interval_ms=args.interval_ms,
            recovery_bound_s=args.recovery_bound_s or (60.0 if args.quick else 90.0),
            # quick: the gap only has to separate one fault's recovery from the next (the lag
            # bound's baseline looks 15 s back, over the previous gap and recovery alike)
            gap_s=args.gap_s if args.gap_s is not None else (3.0 if args.quick else 20.0),
            warmup_s=args.warmup if args.warmup is not None else (8.0 if args.quick else 30.0),
            kube=not args.no_kube, seed=args.seed, ready_timeout_s=args.ready_timeout, env=parse_env(args.env),
            drain_s=60.0 if args.quick else 180.0,
            # a graceful kube-apiserver stop outlasts either grace (it waits for its watches), so the
            # quick run reaches the SIGKILL sooner; the outage the referee rides out is still real
            apiserver_grace_s=QUICK_APISERVER_GRACE_S if args.quick else APISERVER_GRACE_S,
        )


def chaos_phases(a: ChaosArgs, faults: int) -> list[Phase]:
    """Warm-up, an open-ended chaos phase (ended by SIGUSR1 after the last fault), the flush."""
    chaos_s = faults * (a.recovery_bound_s + a.gap_s + 30.0) + a.gap_s
    flush_s = HOP_S + 2 * a.interval_ms / 1000.0
    return [Phase("warmup", a.rate, a.warmup_s, a.interval_ms), Phase("chaos", a.rate, chaos_s, a.interval_ms),
            Phase(FLUSH_PHASE, a.rate, flush_s, a.interval_ms)]


def main(args: argparse.Namespace) -> int:
    try:
        a = ChaosArgs.parse(args)
    except ValueError as exc:
        print(f"borgctl load chaos: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run_chaos(a)


def run_chaos(a: ChaosArgs) -> int:
    a.out.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    private = Path(tempfile.mkdtemp(prefix=f"borg-chaos-{run_id}-"))
    broker = PrivateBroker(private / "kafka-state")
    apiserver = PrivateApiserver(private / "kube") if a.kube else None
    seeded: Seeded | None = None
    try:
        progress(f"private broker on {broker.bootstrap} (state {broker.state})")
        try:
            broker.start()
        except StackError as exc:
            progress(f"FAILED: {exc}")
            return EXIT_KAFKA
        env = {**CHAOS_ENV, **a.env}
        if apiserver is not None:
            try:
                took = apiserver.start()
            except StackError as exc:
                progress(f"FAILED: {exc}")
                return EXIT_FAILED
            progress(f"private kube-apiserver ready at {apiserver.url} in {took:.1f}s (etcd shared)")
            nodes = nodes_for(a.rate, a.interval_ms)
            try:
                seeded = seed_cluster(nodes, run_id)
            except SystemExit as exc:  # seed_cluster's kubectl helper exits with the API's message
                progress(f"FAILED: seeding the cluster: {exc}")
                return EXIT_FAILED
            progress(f"seeded {nodes} nodes and namespace {seeded.namespace}")
            kubeconfig = str(apiserver.kubeconfig)
            env.update({"KUBECONFIG": kubeconfig, "REFEREE_KUBECONFIG": kubeconfig, "WATCHER_KUBECONFIG": kubeconfig,
                        "WATCHER_NAMESPACE": seeded.namespace})
        else:
            env["REFEREE_MODE"] = "shadow"
        return run_load(a, broker, apiserver, env)
    finally:
        if seeded is not None:
            unseed_cluster(seeded)
        if apiserver is not None:
            apiserver.stop()
        with contextlib.suppress(StackError):
            broker.stop()
        shutil.copytree(private, a.out / "logs" / "private", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("data", "pki", "*.kubeconfig"))
        shutil.rmtree(private, ignore_errors=True)


def run_load(a: ChaosArgs, broker: PrivateBroker, apiserver: PrivateApiserver | None, env: dict[str, str]) -> int:
    services = [*PIPELINE, *([WATCHER] if apiserver is not None else [])]
    faults = plan_faults(services, kube=apiserver is not None)
    phases = chaos_phases(a, len(faults))
    ticks = a.out / "ticks.jsonl"
    config = RunConfig(bootstrap=broker.bootstrap, out_dir=a.out, services=services, phases=phases, seed=a.seed,
                       task_rate=30.0, ready_timeout_s=a.ready_timeout_s, drain_s=a.drain_s, quiet_s=3.0,
                       keep_windows=True, ticks_out=ticks, extra_env=env)
    harness = Harness(config, say=progress)
    harness.observer = ChaosObserver(broker.bootstrap, harness.prefix)
    pipeline = SupervisedPipeline(broker.bootstrap, harness.prefix, a.out, env)
    harness.pipeline = pipeline
    controller = Controller(harness, pipeline, faults, broker=broker, apiserver=apiserver,
                            recovery_bound_s=a.recovery_bound_s, gap_s=a.gap_s,
                            apiserver_grace_s=a.apiserver_grace_s)

    def on_restart(sp: ServiceProc) -> None:
        harness.procs.watch(sp.name, sp.pid)

    pipeline.on_restart = on_restart
    harness.on_phase = controller.on_phase
    # the harness samples "the broker" from the shared pid file: point it at this run's broker
    harness_module.kafka_pid = broker.pid  # type: ignore[attr-defined,assignment]
    progress(f"{a.rate:,.0f} NodeState/s; faults: {', '.join(f.name for f in faults)}")
    started = time.monotonic()
    try:
        data = asyncio.run(run_with(harness, controller))
    except harness_module.KafkaUnreachableError as exc:
        progress(str(exc))
        return EXIT_KAFKA
    progress(f"load done after {time.monotonic() - started:.0f}s; accounting")
    return report(a.out, a.rate, a.recovery_bound_s, harness, data, faults, controller, pipeline)


async def run_with(harness: Harness, controller: Controller) -> RunData:
    try:
        return await harness.run()
    finally:
        if controller.task is not None and not controller.task.done():
            controller.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await controller.task


