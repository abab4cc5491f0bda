"""The generated malformed corpus (tests/malformed_corpus.py), produced by kcat to every input topic of every
Kafka-consuming service, with the services running as real processes (issue 19 item 7).

Each service must dead-letter each refused case of each of its input topics exactly once (letters counted
by (service, source topic, offset)), write no letter for a case the contract accepts, keep every letter
bounded and faithful (size and SHA-256 of the original), keep running, and handle the good records
produced after the corpus. kcat sends every case it can express; the two it cannot (a header with an empty
name, a NUL byte in a header value: its ``-H`` comes from argv) go through aiokafka (``test_kcat_cannot_send``).
A header *name* that is not UTF-8 is kept apart: aiokafka cannot read it at all (the last two tests).

    .venv/bin/python -m pytest tests/integration/test_malformed_corpus.py    # ~40 s on 2 cores
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import shutil
import time
from collections import Counter as Tally
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from contracts import (
    AnomalyScore,
    ClusterState,
    ContractError,
    DeadLetterV2,
    Decision,
    FailureRiskV2,
    FeatureVector,
    NodeState,
    Proposal,
    RegimeLabelV2,
    TaskEvent,
    decode,
    encode,
)
from contracts.base import Contract
from contracts.models import DeploymentState, DriftReport, HorizonRisk, LoadForecast, PodPressure, TargetRef
from contracts.topics import DRIFT_TOPIC, FORECASTS_TOPIC, REGIMES_TOPIC, RISK_TOPIC, Topic
from services.agents import admission, efficiency, reliability
from services.risk.model import load_failure_model
from services.runtime.admin import connect_admin
from services.runtime.deadletter import HEADER_VALUE_MAX, HEADERS_MAX, KEY_MAX, VALUE_MAX
from services.runtime.model_watch import ModelRefusedError, resolve
from simulator import SyntheticCluster
from simulator.arena.world import ArenaCluster
from tests.conftest import wait_until
from tests.integration.test_referee_helpers import kube_admin  # noqa: F401 (fixture)
from tests.integration.test_stream_pipeline import ServiceProc, collector, running, spawn, wait_ready
from tests.kafka_helpers import drain
from tests.malformed_corpus import Case, consumer_breaking_cases, corpus, template
from tests.unit.test_risk_service import train_provisional_failure_model

ROOT = Path(__file__).resolve().parents[2]
M = TypeVar("M", bound=Contract)
pytestmark = [pytest.mark.integration]

SERVICES: dict[str, tuple[str, tuple[str, ...]]] = {
    # dead letters' ``service`` → (module under services/, input topics)
    "features": ("features", ("nodestate.v1",)),
    "regime": ("regime", ("features.v1",)),
    "anomaly": ("anomaly", ("features.v1",)),
    "risk": ("risk", ("taskevents.v1", "features.v1")),
    "forecast": ("forecast", ("features.v1",)),
    "pod-pressure": ("pod_pressure", ("nodestate.v1",)),
    "pod-regime": ("regime.pods", ("nodestate.v1",)),
    "drift": ("drift", ("features.v1", REGIMES_TOPIC, RISK_TOPIC, "taskevents.v1")),
    "agent-reliability": ("agents.reliability", reliability.INPUT_TOPICS),
    "agent-efficiency": ("agents.efficiency", efficiency.INPUT_TOPICS),
    "agent-admission": ("agents.admission", admission.INPUT_TOPICS),
    "referee": ("referee.main", ("proposals.v1",)),
}
PROCESSING_REFUSALS: dict[tuple[str, str], frozenset[str]] = {
    # (service, topic) → cases the contract accepts but the service, by design, cannot process (one
    # ``processing`` letter each): NodeState.seq is an unbounded int, the window state stores int64
    # (featurelib.node.windows._SEQ_LIMIT)
    ("features", "nodestate.v1"): frozenset({"int_2_pow_70", "int_400_digits"}),
    ("pod-regime", "nodestate.v1"): frozenset({"int_2_pow_70", "int_400_digits"}),  # the same node windows
}
TOPICS = sorted({t for _, topics in SERVICES.values() for t in topics})
CORPUS_PARTITION = 0
"""Every corpus case and every good record goes to this partition: the good ones come after the corpus."""


def group_of(service: str, prefix: str) -> str:
    if service.startswith("agent-") or service == "referee":
        return f"{prefix}{service}"  # set through AGENT_<NAME>_GROUP_ID / REFEREE_GROUP_ID below
    return f"{prefix}borg-{service}"


async def broker_message_max_bytes(bootstrap: str) -> int:
    """The broker's ``message.max.bytes`` (what a produce request's record batch may hold)."""
    admin = await connect_admin(bootstrap, timeout_s=10)
    try:
        for response in await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")]):
            for resource in response.resources:
                for entry in resource[4]:
                    if entry[0] == "message.max.bytes":
                        return int(entry[1])
    finally:
        await admin.close()
    raise AssertionError("the broker did not report message.max.bytes")


# -- producing the corpus -------------------------------------------------------------------------------


def kcat_command(bootstrap: str, topic: str, case: Case, limit: int, value_file: Path) -> tuple[list[bytes], bytes]:
    """kcat's argv and stdin for one case: a value from a file (sent whole, binary-safe); empty and null
    values as a key-only line (``-K``; ``-Z`` makes the empty payload NULL, a tombstone)."""
    exe = shutil.which("kcat")
    assert exe, "kcat is required (scripts/ensure-system.sh installs it)"
    argv = [exe.encode(), b"-b", bootstrap.encode(), b"-P", b"-t", topic.encode(),
            b"-p", str(CORPUS_PARTITION).encode(),
            # librdkafka's own limit defaults to 1,000,000: the broker's is the one under test
            b"-X", f"message.max.bytes={limit}".encode()]
    for name, value in case.headers:
        argv += [b"-H", name.encode("utf-8", "surrogateescape") + b"=" + value]
    stdin = b""
    if case.value is None or case.value == b"":
        assert case.key is not None
        argv += [b"-K", b"\\t"] + ([b"-Z"] if case.value is None else [])
        stdin = case.key + b"\t\n"
    else:
        if case.key is not None:
            argv += [b"-k", case.key]
        value_file.write_bytes(case.value)
        argv.append(str(value_file).encode())
    return argv, stdin


async def kcat_produce(bootstrap: str, topic: str, case: Case, limit: int, value_file: Path,
                       gate: asyncio.Semaphore) -> None:
    argv, stdin = kcat_command(bootstrap, topic, case, limit, value_file)
    async with gate:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        try:
            _, err = await asyncio.wait_for(proc.communicate(stdin), timeout=60)
        finally:
            if proc.returncode is None:  # cancelled (another case failed) or timed out
                proc.kill()
                await proc.wait()
            value_file.unlink(missing_ok=True)
    assert proc.returncode == 0, f"kcat could not send {case.name} to {topic}: {err.decode(errors='replace')}"
    assert b"ERROR" not in err, f"kcat reported an error for {case.name} on {topic}: {err.decode(errors='replace')}"


async def produce_corpus(bootstrap: str, prefix: str, cases: dict[str, list[Case]], limit: int,
                         tmp: Path) -> list[str]:
    """Every case to partition 0 of its topic: kcat where it can, else aiokafka; returns what aiokafka sent."""
    gate = asyncio.Semaphore(4)
    jobs = []
    by_aiokafka: list[tuple[str, Case]] = []
    for topic, topic_cases in cases.items():
        for i, case in enumerate(topic_cases):
            if case.kcat_ok:
                jobs.append(kcat_produce(bootstrap, prefix + topic, case, limit, tmp / f"{topic}-{i}.bin", gate))
            else:
                by_aiokafka.append((topic, case))
    async with asyncio.TaskGroup() as group:  # the first failure cancels (and reaps) the rest
        for job in jobs:
            group.create_task(job)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, max_request_size=limit)
    await producer.start()
    try:
        for topic, case in by_aiokafka:
            await producer.send_and_wait(prefix + topic, key=case.key, value=case.value, headers=list(case.headers),
                                         partition=CORPUS_PARTITION)
    finally:
        await producer.stop()
    return sorted({case.name for _, case in by_aiokafka})


async def corpus_offsets(bootstrap: str, prefix: str, cases: dict[str, list[Case]]) -> dict[tuple[str, int], Case]:
    """(topic, offset) of every case, read back from partition 0 (kcat runs concurrently: no order assumed).

    A case is recognised by its key (``corpus-<name>``); the keyless ones by their value."""
    found: dict[tuple[str, int], Case] = {}
    for topic, topic_cases in cases.items():
        by_key = {c.key: c for c in topic_cases if c.key is not None}
        keyless = {c.value: c for c in topic_cases if c.key is None}
        tp = TopicPartition(prefix + topic, CORPUS_PARTITION)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    max_partition_fetch_bytes=16 * 1024 * 1024)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            deadline = time.monotonic() + 30
            while await consumer.position(tp) < end:
                assert time.monotonic() < deadline, f"{topic}: corpus not read back"
                for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                    for r in records:
                        case = by_key.get(r.key) if r.key is not None else keyless.get(r.value)
                        assert case is not None, f"{topic}@{r.offset}: a record that is no corpus case"
                        found[(topic, r.offset)] = case
        finally:
            await consumer.stop()
        assert sorted(c.name for (t, _), c in found.items() if t == topic) == sorted(c.name for c in topic_cases)
    return found


# -- good records after the corpus ------------------------------------------------------------------------


def good_records(now_ms: int) -> dict[str, list[tuple[str, Contract]]]:
    """Valid input for every topic, each meant to show in some service's output."""
    sim = SyntheticCluster(nodes=2, seed=5, start_ms=now_ms - 40_000)
    states = [NodeState.model_validate(s) for batch in sim.run(36) for s in batch.nodestate_dicts()]
    fv = template("features.v1")
    vectors = [FeatureVector.model_validate({**fv, "node": f"good-fv-{i}", "ts_ms": now_ms - 1000 * i,
                                             "input_ts_ms": now_ms - 1000 * i - 5}) for i in range(3)]
    # the forecast stage answers when a 5-minute bucket closes: two windows of one node, 400 s apart
    vectors += [FeatureVector.model_validate({**fv, "node": "good-fc", "ts_ms": ts, "input_ts_ms": ts - 5})
                for ts in (now_ms - 400_000, now_ms)]
    tasks = [TaskEvent(task_id=f"good-task-{i}", job_id="good-job", task_index=i, ts_ms=now_ms + i, event=event,
                       source="synthetic", machine="good-fv-0", cpu_request=0.2, memory_request=0.1)
             for i in range(2) for event in ("SUBMIT", "SCHEDULE")]
    pressure = ClusterState(cluster="good", namespace="good", ts_ms=now_ms, pending_pods=0, running_pods=2,
                            queue_health="healthy", deployments=[DeploymentState(
                                namespace="good", name="web", desired_replicas=2, ready_replicas=0,
                                available_replicas=0)])
    cluster_wide = ClusterState(cluster="good", ts_ms=now_ms, pending_pods=0, running_pods=2, queue_health="healthy",
                                nodes_total=6, nodes_ready=6)
    hot = RegimeLabelV2(node="good-hot", ts_ms=now_ms, regime="membw", confidence=0.9, raw_regime="membw",
                        changed=True, interference={"memory_bound": 3.2, "cpu_bound": 1.1}, model_version="it",
                        input_ts_ms=now_ms - 40)
    # the pod-pressure stage answers when a node's 10 s window of per-pod counters closes
    pods = ArenaCluster(1, seed=5, interval_ms=1000, node_names=["good-pod"])
    pods.set_corunners(0, ["spmv"], [0.9], ["0f6c1a2b-1234-4abc-9def-0123456789ab"])
    for k in range(11):
        state = pods.tick().nodestate_dicts(ts_ms=now_ms - 11_000 + 1000 * k)[0]
        states.append(NodeState.model_validate({**state, "cgroups": pods.cgroup_dicts(0, 1.0)}))
    idle_state = NodeState.model_validate({**template("nodestate.v1"), "node": "good-idle", "ts_ms": now_ms,
                                           "cpu_util": 0.02, "mem_util": 0.05})
    idle_risk = FailureRiskV2(target_kind="node", target="good-idle", node="good-idle", ts_ms=now_ms,
                              horizons=[HorizonRisk(horizon_s=600, probability=0.01)], model_version="it",
                              input_ts_ms=now_ms)
    idle_anomaly = AnomalyScore(node="good-idle", ts_ms=now_ms, score=0.05, is_anomaly=False, threshold=0.9,
                                model_version="it", input_ts_ms=now_ms)
    proposal = Proposal(proposal_id="good-proposal", agent="reliability", kind="scale_out",
                        target=TargetRef(kind="Deployment", name="api", namespace="good"), payload={"replicas": 3},
                        score=0.9, ts_ms=now_ms)
    return {
        "clusterstate.v1": [("good/good", pressure), ("good", cluster_wide)],
        "anomalies.v1": [("good-idle", idle_anomaly)],
        RISK_TOPIC: [("node:good-idle", idle_risk)],
        "nodestate.v1": [*((s.node, s) for s in states), ("good-idle", idle_state)],
        "features.v1": [(v.node, v) for v in vectors],
        "taskevents.v1": [(t.task_id, t) for t in tasks],
        REGIMES_TOPIC: [("good-hot", hot), ("good-idle", calm_label(now_ms))],
        "proposals.v1": [("Deployment/good/api", proposal)],
    }


def calm_label(ts_ms: int) -> RegimeLabelV2:
    return RegimeLabelV2(node="good-idle", ts_ms=ts_ms, regime="none", confidence=0.9, raw_regime="none",
                         changed=False, interference={"cpu_bound": 1.0}, model_version="it", input_ts_ms=ts_ms)


async def produce_good(bootstrap: str, prefix: str, records: dict[str, list[tuple[str, Contract]]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        for topic, items in records.items():
            for key, value in items:
                await producer.send(prefix + topic, key=key.encode(), value=encode(value),
                                    partition=CORPUS_PARTITION,
                                    headers=[("content-type", b"application/json"), ("schema", topic.encode())])
        await producer.flush()
    finally:
        await producer.stop()


async def end_offsets(bootstrap: str, prefix: str, topics: Iterable[str]) -> dict[str, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(prefix + t, CORPUS_PARTITION) for t in topics]
        return {tp.topic[len(prefix):]: off for tp, off in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def committed(bootstrap: str, group: str, prefix: str, topics: Iterable[str]) -> dict[str, int]:
    admin = await connect_admin(bootstrap, timeout_s=10)
    try:
        tps = [TopicPartition(prefix + t, CORPUS_PARTITION) for t in topics]
        listed = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await admin.close()
    return {tp.topic[len(prefix):]: om.offset for tp, om in listed.items()}


def accepted(got: Any, base: str, model: type[M]) -> list[M]:
    """The records of ``base`` the contract accepts (the input topics hold the corpus too)."""
    out = []
    for record in got.records[base]:
        try:
            out.append(decode(model, record.value))
        except ContractError:
            pass
    return out


# -- checking the dead letters ------------------------------------------------------------------------------


def check_copy(what: str, copy: Any, original: bytes | None, limit: int) -> list[str]:
    if original is None:
        return [] if copy is None else [f"{what}: a copy of a null"]
    if copy is None:
        return [f"{what}: no copy"]
    problems = []
    kept = base64.b64decode(copy.b64)
    if copy.size != len(original):
        problems.append(f"{what}: size {copy.size} != {len(original)}")
    if copy.sha256 != hashlib.sha256(original).hexdigest():
        problems.append(f"{what}: sha256 differs")
    if copy.truncated != (len(original) > limit) or kept != original[:limit]:
        problems.append(f"{what}: kept {len(kept)} bytes (truncated={copy.truncated}) of {len(original)}")
    return problems


def expected_kind(service: str, topic: str, case: Case) -> str | None:
    """The letter ``service`` owes ``case`` on ``topic``: decode's refusal, a known processing refusal, or none."""
    if case.refusal is not None:
        return case.refusal
    return "processing" if case.name in PROCESSING_REFUSALS.get((service, topic), ()) else None


def check_letter(letter: DeadLetterV2, case: Case, kind: str, wire_size: int) -> list[str]:
    where = f"{letter.service} {case.name}"
    problems = check_copy(f"{where} value", letter.value, case.value, VALUE_MAX)
    problems += check_copy(f"{where} key", letter.key, case.key, KEY_MAX)
    if letter.error_kind != kind:
        problems.append(f"{where}: error_kind {letter.error_kind}, expected {kind} ({letter.error[:300]})")
    if len(letter.headers) != min(len(case.headers), HEADERS_MAX) or \
            letter.headers_dropped != max(0, len(case.headers) - HEADERS_MAX):
        problems.append(f"{where}: {len(letter.headers)} headers kept, {letter.headers_dropped} dropped "
                        f"of {len(case.headers)}")
    for kept, (name, value) in zip(letter.headers, case.headers, strict=False):
        if kept.name != name[:253]:
            problems.append(f"{where}: header {name!r} kept as {kept.name!r}")
        problems += check_copy(f"{where} header {name!r}", kept.value, value, HEADER_VALUE_MAX)
    if wire_size > 300_000:
        problems.append(f"{where}: the letter is {wire_size} bytes")
    return problems


# -- the test ---------------------------------------------------------------------------------------------------


def models_dir(tmp: Path) -> Path:
    models = tmp / "models"
    try:  # the shipped failure model when there is a loadable one, else a small one trained here
        shipped = resolve(ROOT / "models" / "failure")
        load_failure_model(shipped)
        shutil.copytree(shipped, models / "failure" / "shipped")
        (models / "failure" / "CURRENT").write_text("shipped\n")
    except (ModelRefusedError, OSError):
        train_provisional_failure_model(models / "failure")
    return models / "failure"


def spawn_all(bootstrap: str, prefix: str, tmp: Path, kubeconfig: Path) -> tuple[ServiceProc, ...]:
    failure = models_dir(tmp)
    extra: dict[str, dict[str, str]] = {
        "pod-regime": {"KUBECONFIG": str(kubeconfig)},  # each pod's job comes from the API server's pod list
        "risk": {"RISK_MODEL_DIR": str(failure), "RISK_RESCORE_S": "0"},
        "drift": {"DRIFT_FAILURE_MODEL_DIR": str(failure), "DRIFT_REPORT_EVERY_S": "1"},
        "referee": {"REFEREE_MODE": "shadow", "REFEREE_GROUP_ID": group_of("referee", prefix),
                    "REFEREE_WINDOW_MS": "100", "REFEREE_MIN_SCORE": "0.05"},
    }
    for name in ("reliability", "efficiency", "admission"):
        extra[f"agent-{name}"] = {f"AGENT_{name.upper()}_GROUP_ID": group_of(f"agent-{name}", prefix)}
    return tuple(spawn(module, bootstrap, prefix, tmp, **extra.get(service, {}))
                 for service, (module, _) in SERVICES.items())


@pytest.mark.kube
async def test_every_service_dead_letters_each_refused_case_once_and_keeps_running(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, kube_admin: Path) -> None:  # noqa: F811
    prefix = topic_prefix
    limit = await broker_message_max_bytes(kafka_bootstrap)
    cases = {topic: corpus(topic, limit) for topic in TOPICS}
    sent_by_aiokafka = await produce_corpus(kafka_bootstrap, prefix, cases, limit, tmp_path)
    assert sent_by_aiokafka == ["header_empty_name", "header_value_with_nul"]
    located = await corpus_offsets(kafka_bootstrap, prefix, cases)
    refused = {(topic, offset): case for (topic, offset), case in located.items() if case.refused}
    assert any(c.name == "just_under_broker_limit" for c in refused.values())
    # a value *at* the limit never reaches a service: the broker refuses it (the batch framing adds ~70 bytes)
    at_limit = Case(name="at_broker_limit", key=b"corpus-at_broker_limit", value=b"a" * limit)
    with pytest.raises(AssertionError, match="too large"):
        await kcat_produce(kafka_bootstrap, prefix + "nodestate.v1", at_limit, limit, tmp_path / "at.bin",
                           asyncio.Semaphore(1))

    services = spawn_all(kafka_bootstrap, prefix, tmp_path, kube_admin)
    bases = ["deadletter.v2", "features.v1", REGIMES_TOPIC, "anomalies.v1", RISK_TOPIC, "proposals.v1",
             "decisions.v1", FORECASTS_TOPIC, DRIFT_TOPIC, Topic.PODPRESSURE, Topic.PODREGIMES]
    with running(*services):
        await wait_ready(services, timeout=120)
        now_ms = int(time.time() * 1000)
        good = good_records(now_ms)
        await produce_good(kafka_bootstrap, prefix, good)
        ends = await end_offsets(kafka_bootstrap, prefix, TOPICS)
        expected_letters = sum(1 for (topic, _), case in located.items() for service, (_, topics) in SERVICES.items()
                               if topic in topics and expected_kind(service, topic, case) is not None)
        async with collector(kafka_bootstrap, prefix, bases) as (_, poll_until):
            missing: list[str] = []

            def outputs_seen(g: Any) -> bool:
                regimes = {v.node for v in accepted(g, REGIMES_TOPIC, RegimeLabelV2)}
                anomalies = {v.node for v in accepted(g, "anomalies.v1", AnomalyScore)}
                risks = {v.target for v in accepted(g, RISK_TOPIC, FailureRiskV2)}
                proposals = {(p.agent, p.target.key()) for p in accepted(g, "proposals.v1", Proposal)}
                decisions = {d.target.key() for d in accepted(g, "decisions.v1", Decision)}
                forecasts = {f.node for f in accepted(g, FORECASTS_TOPIC, LoadForecast)}
                pod_pressures = {(p.node, p.status) for p in accepted(g, Topic.PODPRESSURE, PodPressure)}
                pod_regimes = {r.node for r in accepted(g, Topic.PODREGIMES, RegimeLabelV2)}
                checks = {
                    f"{expected_letters} dead letters": len(g.records["deadletter.v2"]) >= expected_letters,
                    "features of the sim- nodes": any(v.node.startswith("sim-")
                                                      for v in accepted(g, "features.v1", FeatureVector)),
                    "regime of good-fv-0": "good-fv-0" in regimes,
                    "anomaly of good-fv-0": "good-fv-0" in anomalies,
                    "risk of good-task-0": "good-task-0" in risks,
                    "reliability scale-out of good/web": ("reliability", "Deployment/good/web") in proposals,
                    "admission proposal on good-hot": ("admission", "Node/_/good-hot") in proposals,
                    "decision on good/api": "Deployment/good/api" in decisions,
                    "forecast of good-fc": "good-fc" in forecasts,
                    "pod pressure on good-pod": ("good-pod", "ok") in pod_pressures,
                    "pod-relative regime of good-pod": "good-pod" in pod_regimes,
                    "a drift report": bool(accepted(g, DRIFT_TOPIC, DriftReport)),
                }
                missing[:] = [what for what, ok in checks.items() if not ok]
                return not missing

            try:
                await poll_until(outputs_seen, 90, "a letter per refused case and service, outputs of the good records")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; missing: {missing}") from None

            # every group is past the corpus and the good records (a commit follows the letters' acks)
            behind: dict[str, dict[str, tuple[int, int]]] = {}

            async def caught_up() -> bool:
                behind.clear()
                for service, (_, topics) in SERVICES.items():
                    done = await committed(kafka_bootstrap, group_of(service, prefix), prefix, topics)
                    late = {t: (done.get(t, -1), ends[t]) for t in topics if done.get(t, -1) < ends[t]}
                    if late:
                        behind[service] = late
                return not behind

            try:
                await wait_until(caught_up, timeout=60, interval=0.5, what="every group past the corpus")
            except AssertionError as exc:
                raise AssertionError(f"groups not past the corpus and good records (committed, end): {behind}") \
                    from exc

            # efficiency's inputs are in its view now: a calm label for the idle node makes it consolidate it
            await produce_good(kafka_bootstrap, prefix, {REGIMES_TOPIC: [("good-idle", calm_label(now_ms + 1))]})
            await poll_until(lambda g: ("efficiency", "Node/_/good-idle") in {
                (p.agent, p.target.key()) for p in accepted(g, "proposals.v1", Proposal)}, 30, "efficiency consolidate")

        crashed = {s.name: (s.proc.returncode, s.tail()) for s in services if s.proc.poll() is not None}
        assert not crashed, f"services stopped: {crashed}"
        # every letter written so far (a second letter for a case would come before the commit past it)
        dead = await drain(kafka_bootstrap, prefix + "deadletter.v2")

    letters: Tally[tuple[str, str, int]] = Tally()
    problems: list[str] = []
    for record in dead:
        letter = decode(DeadLetterV2, record.value)
        topic = letter.source_topic[len(prefix):]
        letters[(letter.service, topic, letter.offset)] += 1
        case = located.get((topic, letter.offset)) if letter.partition == CORPUS_PARTITION else None
        if case is None:
            problems.append(f"{letter.service}: a letter for a record that is no corpus case: {topic}"
                            f"[{letter.partition}]@{letter.offset} ({letter.error_kind}: {letter.error[:200]})")
        elif (kind := expected_kind(letter.service, topic, case)) is None:
            problems.append(f"{letter.service}: dead-lettered {case.name} on {topic}, which the contract accepts "
                            f"({letter.error_kind}: {letter.error[:200]})")
        elif letters[(letter.service, topic, letter.offset)] == 1:
            problems += check_letter(letter, case, kind, len(record.value))
    for service, (_, topics) in SERVICES.items():
        for (topic, offset), case in located.items():
            owed = 1 if topic in topics and expected_kind(service, topic, case) is not None else 0
            if letters[(service, topic, offset)] != owed:
                problems.append(f"{service}: {letters[(service, topic, offset)]} letters for {case.name} on {topic}, "
                                f"expected {owed}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
    assert sum(letters.values()) == expected_letters
    big = [c for c in located.values() if c.value is not None and len(c.value) > VALUE_MAX and c.refused]
    assert len(big) >= 2 * len(TOPICS)  # at least the ~1 MB and the 900 KB case of every topic were truncated


def test_kcat_cannot_send() -> None:
    """What kcat cannot express, and so goes through aiokafka: a header with an empty name (kcat refuses
    ``-H =value``) and a NUL byte in a header value (``-H`` comes from argv)."""
    cases = corpus("nodestate.v1", 1_048_588)
    assert [c.name for c in cases if not c.kcat_ok] == ["header_empty_name", "header_value_with_nul"]
    assert all(c.kcat_ok for c in consumer_breaking_cases("nodestate.v1"))


async def read_some(consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
    for _ in range(50):
        if await consumer.getmany(tp, timeout_ms=200):
            return


async def kcat_send(bootstrap: str, topic: str, case: Case, value_file: Path) -> None:
    argv, stdin = kcat_command(bootstrap, topic, case, 1_048_588, value_file)
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate(stdin)
    assert proc.returncode == 0, err


async def test_aiokafka_cannot_read_a_header_name_that_is_not_utf8(kafka_bootstrap: str, topic_prefix: str,
                                                                    tmp_path: Path) -> None:
    """The root cause of the next test: aiokafka decodes header names as UTF-8 while unpacking a fetched batch,
    so ``getmany`` raises ``UnicodeDecodeError`` for the partition, again on every call, and never moves past it.
    (When this starts failing, aiokafka reads such records: drop it and see whether the next test passes.)"""
    [case] = consumer_breaking_cases("nodestate.v1")
    topic = topic_prefix + "nodestate.v1"
    await kcat_send(kafka_bootstrap, topic, case, tmp_path / "case.bin")
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, CORPUS_PARTITION)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        for _ in range(2):
            with pytest.raises(UnicodeDecodeError):
                await read_some(consumer, tp)
        assert await consumer.position(tp) == 0
    finally:
        await consumer.stop()


async def test_a_header_name_that_is_not_utf8_is_dead_lettered_and_the_service_keeps_running(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    [case] = consumer_breaking_cases("nodestate.v1")
    await kcat_send(kafka_bootstrap, topic_prefix + "nodestate.v1", case, tmp_path / "case.bin")
    service = spawn("features", kafka_bootstrap, topic_prefix, tmp_path)
    with running(service):
        async with collector(kafka_bootstrap, topic_prefix, ["deadletter.v2"]) as (_, poll_until):
            def lettered(g: Any) -> bool:
                assert service.proc.poll() is None, f"features exited:\n{service.tail(12)}"
                return any(decode(DeadLetterV2, r.value).offset == 0 for r in g.records["deadletter.v2"])

            await poll_until(lettered, 60, "a letter for the record")
        assert service.proc.poll() is None
