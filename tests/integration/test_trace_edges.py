"""Follow a decision end to end in the real Jaeger: a data table of expected edges, producer spans and
the scheduler extender's links.

Replays synthetic NodeState through the running pipeline (features → regime → admission
agent → referee → Kubernetes), picks a decision, and polls Jaeger's API until every edge
of the table is present in the decision's trace (bounded wait, no sleeps as assertions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import Decision, decode
from contracts.topics import REGIMES_TOPIC
from loadtests.procs import free_port
from tests.conftest import ROOT, wait_until
from tests.kafka_helpers import drain

pytestmark = [pytest.mark.integration, pytest.mark.jaeger, pytest.mark.kube]

JAEGER = "http://127.0.0.1:16686"
OTLP = "http://127.0.0.1:4317"
NODES = 8

# (producing service, consuming service, topic): one row per hop a decision's trace must show.
EXPECTED_EDGES: list[tuple[str, str, str]] = [
    ("replay", "features", "nodestate.v1"),
    ("features", "regime", "features.v1"),
    ("regime", "agent-admission", REGIMES_TOPIC),
    ("agent-admission", "referee", "proposals.v1"),
]
# Spans the referee itself must record inside the decision's trace.
EXPECTED_REFEREE_SPANS = ["referee decide", "k8s write"]
# PRODUCER spans (messaging conventions) of the outputs on the decision's path.
EXPECTED_PRODUCER_SPANS = [("replay", "nodestate.v1 publish"), ("features", "features.v1 publish"),
                           ("regime", f"{REGIMES_TOPIC} publish"), ("agent-admission", "proposals.v1 publish"),
                           ("referee", "decisions.v1 publish"), ("referee", "actions.v1 publish")]
# (service, span, its parent's service, the parent span): a stream stage's output has a producer span below
# the stage span of the record it answers, and the next stage continues from that producer span.
EXPECTED_PARENTS = [("features", "features.v1 publish", "features", "features window"),
                    ("regime", "regime infer", "features", "features.v1 publish"),
                    ("regime", f"{REGIMES_TOPIC} publish", "regime", "regime infer")]
SERVICES = ["features", "regime", "anomaly", "agent-admission", "referee"]
MIN_SERVICES = 6
"""replay, features, regime, anomaly (it consumes the same window, continuing its trace), the agent, the referee."""


def _kube(*args: str) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "infra" / "kube" / "kube.sh"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def stack() -> Iterator[str]:
    for component in ("jaeger", "kube"):
        done = subprocess.run(
            ["bash", str(ROOT / "infra" / component / f"{component}.sh"), "start"],
            capture_output=True,
            text=True,
            check=False,
            timeout=3600,
        )
        assert done.returncode == 0, done.stderr
    kubeconfig = _kube("kubeconfig")
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.seed_cluster", "--nodes", str(NODES), "--namespace", "trace-test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "KUBECONFIG": kubeconfig},
    )
    assert done.returncode == 0, done.stderr
    yield kubeconfig


def _jaeger(path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{JAEGER}{path}", timeout=10) as response:
        data: dict[str, Any] = json.load(response)
        return data


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


async def _prioritize_until_linked(port: int, nodes: list[str], tmp_path: Path) -> None:
    """POST /prioritize for the replayed nodes until Jaeger holds its span with a link to a regime message's span
    (its producer span, `regimes.v2 publish`, below the `regime infer` span that made it)."""
    args = {"Pod": {"metadata": {"name": "placed", "namespace": "trace-test", "uid": "u-1",
                                 "labels": {"borg-orchestrator.io/workload-class": "memory_bound"}},
                    "spec": {"containers": [{"name": "app", "image": "x"}]}},
            "Nodes": None, "NodeNames": nodes}
    base = f"http://127.0.0.1:{port}"

    def linked_regime_span() -> bool:
        try:
            _post(f"{base}/prioritize", args)  # an answer per call; its span is exported in the background
            query = urllib.parse.urlencode({"service": "scheduler-extender", "operation": "extender prioritize",
                                            "lookback": "1h", "limit": 20})
            for trace in _jaeger(f"/api/traces?{query}").get("data") or []:
                for span in trace["spans"]:
                    for ref in span.get("references", []):
                        if ref["refType"] == "CHILD_OF":
                            continue
                        target = (_jaeger(f"/api/traces/{ref['traceID']}").get("data") or [{}])[0]
                        if any(t["spanID"] == ref["spanID"] and t["operationName"] == f"{REGIMES_TOPIC} publish"
                               for t in target.get("spans", [])):
                            return True
        except OSError:
            return False
        return False

    try:
        await wait_until(linked_regime_span, timeout=90, interval=2.0,
                         what="an extender prioritize span linking a regime message's producer span")
    except AssertionError:
        log = (tmp_path / "scheduler-extender.log").read_text(errors="replace")[-2000:]
        raise AssertionError(f"no linked extender span; extender log tail:\n{log}") from None


def producers_of(trace: dict[str, Any]) -> set[tuple[str, str]]:
    """(service, span name) of the trace's PRODUCER spans."""
    services = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
    return {(services[s["processID"]], s["operationName"]) for s in trace["spans"]
            if any(t["key"] == "span.kind" and t["value"] == "producer" for t in s.get("tags", []))}


def parents_of(trace: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(service, span name, parent's service, parent's span name) of every span with a parent in the trace."""
    services = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
    spans = {s["spanID"]: s for s in trace["spans"]}
    found = set()
    for span in trace["spans"]:
        for ref in span.get("references", []):
            parent = spans.get(ref["spanID"]) if ref["refType"] == "CHILD_OF" else None
            if parent is not None:
                found.add((services[span["processID"]], span["operationName"], services[parent["processID"]],
                           parent["operationName"]))
    return found


def edges_of(trace: dict[str, Any]) -> tuple[set[tuple[str, str, str]], list[tuple[str, str]]]:
    services = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
    spans = {s["spanID"]: s for s in trace["spans"]}
    found: set[tuple[str, str, str]] = set()
    named = []
    for span in trace["spans"]:
        me = services[span["processID"]]
        named.append((me, span["operationName"]))
        tags = {t["key"]: t["value"] for t in span.get("tags", [])}
        topic = str(tags.get("messaging.destination.name", ""))
        parents = [r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
        links = [r["spanID"] for r in span.get("references", []) if r["refType"] != "CHILD_OF"]
        for parent_id in parents + links:
            parent = spans.get(parent_id)
            if parent is None:
                continue
            other = services[parent["processID"]]
            for _, consumer, base in EXPECTED_EDGES:
                if consumer == me and topic.endswith(base) and other != me:
                    found.add((other, me, base))
        # A service's consumer span may hang below its own processing span: walk up to the first other service.
        if topic and parents:
            cursor = spans.get(parents[0])
            while cursor is not None and services[cursor["processID"]] == me:
                refs = [r["spanID"] for r in cursor.get("references", []) if r["refType"] == "CHILD_OF"]
                cursor = spans.get(refs[0]) if refs else None
            if cursor is not None:
                for _, consumer, base in EXPECTED_EDGES:
                    if consumer == me and topic.endswith(base):
                        found.add((services[cursor["processID"]], me, base))
    return found, named


async def test_decision_trace_has_every_edge(
    stack: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BORG_TOPIC_PREFIX": topic_prefix,
        "OTEL_EXPORTER_OTLP_ENDPOINT": OTLP,
        "OTEL_SAMPLE_RATIO": "1.0",
        "HEALTH_PORT": "0",
        "LOG_LEVEL": "WARNING",
        "REFEREE_MODE": "apply",
        "REFEREE_KUBECONFIG": stack,
        "AGENT_MAX_INPUT_AGE_S": "100000",
        # This test follows a decision's trace, not the policy: with the shipped 0.5, only 3-5 of
        # the ~40 contention proposals this scenario's windows make reach it (the best ~0.55-0.66,
        # by the replay's phase), so whether the referee acted at all depended on the data.
        "REFEREE_MIN_SCORE": "0.05",
    }
    extender_port = free_port()
    env["EXTENDER_PORT"] = str(extender_port)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "borgctl.main", "serve", name],
            cwd=ROOT,
            env=env,
            stdout=(tmp_path / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for name in (*SERVICES, "scheduler-extender")
    ]
    try:
        # 150 samples per node (150 s of trace time, all in the past), sent in ~3 s: the records and their
        # timestamps are what a 30 s replay at 40/s sent; the windows follow trace time, not the pace
        start_ms = int(time.time() * 1000) - 180_000
        replay = subprocess.run(
            [
                sys.executable,
                "-m",
                "borgctl.main",
                "replay",
                "--source",
                "synthetic",
                "--nodes",
                str(NODES),
                "--rate",
                str(NODES * 50),
                "--count",
                str(NODES * 150),
                "--start-ms",
                str(start_ms),
                "--seed",
                "3",
                "--quiet",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert replay.returncode == 0, replay.stderr
        # A decision that chose an action (so the referee wrote to Kubernetes).
        chosen: list[Decision] = []

        async def acted() -> bool:
            records = await drain(kafka_bootstrap, f"{topic_prefix}decisions.v1")
            chosen[:] = [d for d in (decode(Decision, r.value) for r in records) if d.chosen_proposal_id and d.trace_id]
            return bool(chosen)

        try:
            await wait_until(acted, timeout=120, interval=2.0, what="a decision that chose an action")
        except AssertionError as exc:
            # where the chain stopped: records per hop, and decisions that chose nothing
            counts = {base: len(await drain(kafka_bootstrap, f"{topic_prefix}{base}"))
                      for base in ("nodestate.v1", "features.v1", REGIMES_TOPIC, "proposals.v1", "decisions.v1")}
            reasons = [decode(Decision, r.value).reason
                       for r in await drain(kafka_bootstrap, f"{topic_prefix}decisions.v1")][:5]
            logs = {name: (tmp_path / f"{name}.log").read_text(errors="replace")[-2000:] for name in SERVICES}
            raise AssertionError(f"{exc}; records per topic {counts}; first decisions' reasons {reasons}; "
                                 f"service log tails {logs}") from None
        decision = chosen[0]
        assert decision.trace_id is not None

        def complete() -> tuple[set[tuple[str, str, str]], list[tuple[str, str]]] | None:
            try:
                data = _jaeger(f"/api/traces/{decision.trace_id}").get("data") or []
            except OSError:
                return None
            if not data:
                return None
            found, named = edges_of(data[0])
            missing = set(EXPECTED_EDGES) - found
            spans_missing = [s for s in EXPECTED_REFEREE_SPANS if ("referee", s) not in named]
            spans_missing += [f"{svc}: {name}" for svc, name in EXPECTED_PRODUCER_SPANS
                              if (svc, name) not in producers_of(data[0])]
            spans_missing += [f"{row[:2]} below {row[2:]}" for row in EXPECTED_PARENTS
                              if row not in parents_of(data[0])]
            if len({svc for svc, _ in named}) < MIN_SERVICES:
                spans_missing.append(f"spans of {MIN_SERVICES} services")
            return (found, named) if not missing and not spans_missing else None

        try:
            await wait_until(complete, timeout=60, interval=1.0, what="every expected edge in the decision's trace")
        except AssertionError:
            data = (_jaeger(f"/api/traces/{decision.trace_id}").get("data") or [{}])[0]
            found, named = edges_of(data) if data else (set(), [])
            raise AssertionError(
                f"missing edges {set(EXPECTED_EDGES) - found}; spans seen: {sorted(set(named))}; "
                f"producer spans: {sorted(producers_of(data)) if data else []}; "
                f"parents: {sorted(parents_of(data)) if data else []}"
            ) from None

        # The terminal view tells the same story.
        shown = subprocess.run(
            [sys.executable, "-m", "borgctl.main", "trace", decision.decision_id],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        for service in ("replay", *SERVICES):
            assert f"{service}: " in shown.stdout
        assert f"borg.decision.id={decision.decision_id}" in shown.stdout

        # A placement is traceable too: the extender's prioritize span links the regime messages behind
        # the state of its best-scored nodes, so it leads back into those nodes' traces.
        regime_nodes = sorted({r.key.decode() for r in await drain(kafka_bootstrap, f"{topic_prefix}{REGIMES_TOPIC}")})
        assert regime_nodes
        await _prioritize_until_linked(extender_port, regime_nodes, tmp_path)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


async def test_message_without_traceparent_starts_a_new_trace(
    stack: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    from contracts import NodeState, encode
    from contracts.headers import trace_id_of
    from tests.kafka_helpers import consume, produce_raw

    states = [
        NodeState(
            node=f"n{i}",
            ts_ms=1_764_000_000_000 + i,
            seq=i,
            interval_ms=1000,
            source="synthetic",
            pmu="recorded",
            supported_events=[],
            cpu_util=0.2,
            mem_util=0.2,
        )
        for i in range(3)
    ]
    await produce_raw(kafka_bootstrap, f"{topic_prefix}nodestate.v1", [(s.node.encode(), encode(s)) for s in states])
    log = tmp_path / "handled.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": OTLP}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.worker_process",
            kafka_bootstrap,
            topic_prefix,
            f"g-{time.time_ns()}",
            str(log),
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        outputs = await consume(kafka_bootstrap, f"{topic_prefix}anomalies.v1", 3, timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    trace_ids = {trace_id_of(r.headers) for r in outputs}
    assert None not in trace_ids and len(trace_ids) == 3, "each input without a parent starts its own trace"

    def exported() -> bool:
        try:
            return all(_jaeger(f"/api/traces/{t}").get("data") for t in trace_ids)
        except OSError:
            return False

    await wait_until(exported, timeout=60, interval=1.0, what="the new traces in Jaeger")
    root = _jaeger(f"/api/traces/{next(iter(trace_ids))}")["data"][0]["spans"]
    process_spans = [s for s in root if s["operationName"] == "nodestate.v1 process"]
    assert process_spans and not any(r["refType"] == "CHILD_OF" for r in process_spans[0].get("references", []))
