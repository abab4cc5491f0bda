"""The extender over HTTP with real kube-scheduler JSON (captured from kube-scheduler v1.36.3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contracts import telemetry as names
from contracts.models import WORKLOAD_CLASSES, AnomalyScore, FailureRiskV2, HorizonRisk, RegimeLabelV2, RegimeName
from services.runtime.settings import SettingsError, load_settings
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.main import build, scoring_config
from services.scheduler_extender.scoring import ScoringConfig
from services.scheduler_extender.server import ExtenderServer
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY, ExtenderSettings
from services.scheduler_extender.state import NodeStateStore
from tests.conftest import wait_until

# ExtenderArgs exactly as kube-scheduler v1.36.3 POSTs it with nodeCacheCapable: true (node names replaced).
CAPTURED_ARGS = (
    '{"Pod":{"metadata":{"name":"web-0","namespace":"e2e-capture-RUNID","uid":"bdcc5d69-61fb-46c5-85aa-a13335998dd0",'
    '"resourceVersion":"1397","generation":1,"creationTimestamp":"2026-11-25T21:52:55Z","labels":'
    '{"borg-orchestrator.io/workload-class":"memory_bound"}},"spec":{"containers":[{"name":"app","image":'
    '"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"100m","memory":"64Mi"}},"terminationMessagePath":'
    '"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":'
    '"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","nodeSelector":'
    '{"borg-orchestrator.io/e2e-run":"RUNID"},"serviceAccountName":"default","serviceAccount":"default",'
    '"automountServiceAccountToken":false,"securityContext":{},"schedulerName":"borg-e2e-RUNID","tolerations":'
    '[{"key":"borg-orchestrator.io/e2e-run","operator":"Equal","value":"RUNID","effect":"NoSchedule"},'
    '{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},'
    '{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],'
    '"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},"status":{"phase":"Pending",'
    '"qosClass":"Burstable"}},"Nodes":null,"NodeNames":["node-a","node-b"]}'
)
# One item of ExtenderArgs.Nodes as sent with nodeCacheCapable: false (managedFields dropped).
CAPTURED_NODE = (
    '{"metadata":{"name":"NAME","uid":"784b2630-e74c-4b2b-a0eb-d664d4d4af6a","resourceVersion":"1503",'
    '"creationTimestamp":"2026-11-25T21:53:04Z","labels":{"borg-orchestrator.io/e2e-run":"d543255b",'
    '"kubernetes.io/hostname":"NAME"},"annotations":{"node.alpha.kubernetes.io/ttl":"0"}},"spec":{"taints":'
    '[{"key":"borg-orchestrator.io/e2e-run","value":"d543255b","effect":"NoSchedule"}]},"status":{"capacity":'
    '{"cpu":"16","memory":"64Gi","pods":"110"},"allocatable":{"cpu":"16","memory":"64Gi","pods":"110"},"conditions":'
    '[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-11-25T21:53:04Z","lastTransitionTime":'
    '"2026-11-25T21:53:04Z","reason":"KubeletReady","message":"e2e (no kubelet)"}],"daemonEndpoints":'
    '{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"",'
    '"osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"",'
    '"architecture":""}}}'
)
NOW_S = 1_800_000_000.0
NOW = int(NOW_S * 1000)
MEMBW = {"memory_bound": 2.4, "llc_sensitive": 1.3, "cpu_bound": 1.05, "frontend_bound": 1.0}
CALM = {c: 1.0 for c in WORKLOAD_CLASSES}
SEVERE_MEMBW = "borg-orchestrator: predicted memory_bound slowdown at or over 1.50"


def args(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(CAPTURED_ARGS)
    for key, value in changes.items():
        if key == "labels":
            doc["Pod"]["metadata"]["labels"] = value
        elif key == "annotations":
            doc["Pod"]["metadata"]["annotations"] = value
        else:
            doc[key] = value
    return doc


def feed(
    store: NodeStateStore,
    node: str,
    interference: dict[str, float],
    *,
    regime: RegimeName = "membw",
    risk: float = 0.0,
    age_s: float = 0.0,
) -> None:
    ts = int(NOW - age_s * 1000)
    store.apply(
        RegimeLabelV2(
            node=node,
            ts_ms=ts,
            regime=regime,
            confidence=0.9,
            raw_regime=regime,
            changed=False,
            interference=interference,
            model_version="m",
            input_ts_ms=ts,
        ),
        NOW,
    )
    store.apply(
        AnomalyScore(
            node=node, ts_ms=ts, score=0.0, is_anomaly=False, threshold=0.9, model_version="m", input_ts_ms=ts
        ),
        NOW,
    )
    store.apply(
        FailureRiskV2(
            target_kind="node",
            target=node,
            ts_ms=ts,
            model_version="m",
            input_ts_ms=ts,
            horizons=[HorizonRisk(horizon_s=600, probability=risk)],
        ),
        NOW,
    )


class Harness:
    def __init__(self, client: TestClient[Any, Any], server: ExtenderServer, spans: InMemorySpanExporter) -> None:
        self.client = client
        self.server = server
        self.store = server.extender.store
        self.spans = spans

    async def post(self, path: str, body: dict[str, Any] | bytes) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        response = await self.client.post(path, data=data, headers={"Content-Type": "application/json"})
        return response.status, orjson.loads(await response.read())

    async def get(self, path: str) -> tuple[int, Any]:
        response = await self.client.get(path)
        return response.status, orjson.loads(await response.read())


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    store = NodeStateStore(ScoringConfig())
    extender = Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound", clock=lambda: NOW_S)
    server = ExtenderServer(extender, host="127.0.0.1", port=0, tracer=provider.get_tracer("test"))
    client: TestClient[Any, Any] = TestClient(TestServer(server.app))
    await client.start_server()
    try:
        yield Harness(client, server, spans)
    finally:
        await client.close()


async def test_prioritize_real_args(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW)
    feed(harness.store, "node-b", CALM, regime="none")
    status, body = await harness.post("/prioritize", args())
    assert status == 200
    assert body == [{"Host": "node-a", "Score": 4}, {"Host": "node-b", "Score": 10}]


async def test_filter_real_args_drops_the_severe_node(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW)
    feed(harness.store, "node-b", CALM, regime="none")
    status, body = await harness.post("/filter", args())
    assert status == 200
    assert body == {
        "Nodes": None,
        "NodeNames": ["node-b"],
        "FailedNodes": {"node-a": SEVERE_MEMBW},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


async def test_filter_never_drops_every_node(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW)
    feed(harness.store, "node-b", CALM, regime="none", risk=0.95)
    status, body = await harness.post("/filter", args())
    assert status == 200
    assert body["NodeNames"] == ["node-a", "node-b"]
    assert body["FailedNodes"] == {}
    _, last = await harness.get("/debug/last")
    assert "every one of the 2 candidate nodes" in last["filter"]["fallback"]
    assert last["filter"]["nodes"]["node-b"]["filtered"].startswith("node failure risk 0.95")
    assert last["filter"]["nodes"]["node-b"]["passed"] is True


async def test_filter_full_node_objects_when_not_node_cache_capable(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW)
    items = [orjson.loads(CAPTURED_NODE.replace("NAME", n)) for n in ("node-a", "node-b")]
    status, body = await harness.post("/filter", args(Nodes={"metadata": {}, "items": items}, NodeNames=None))
    assert status == 200
    assert body["NodeNames"] is None
    assert [i["metadata"]["name"] for i in body["Nodes"]["items"]] == ["node-b"]
    assert body["Nodes"]["items"][0] == items[1]  # returned untouched
    assert body["FailedNodes"] == {"node-a": SEVERE_MEMBW}
    status, scores = await harness.post("/prioritize", args(Nodes={"metadata": {}, "items": items}, NodeNames=None))
    assert status == 200
    assert [s["Host"] for s in scores] == ["node-a", "node-b"]


@pytest.mark.parametrize(
    ("labels", "annotations", "expected", "source"),
    [
        ({DEFAULT_CLASS_KEY: "memory_bound"}, None, "memory_bound", "label"),
        ({}, {DEFAULT_CLASS_KEY: "llc_sensitive"}, "llc_sensitive", "annotation"),
        ({DEFAULT_CLASS_KEY: "memory_bound"}, {DEFAULT_CLASS_KEY: "cpu_bound"}, "memory_bound", "label"),
        ({DEFAULT_CLASS_KEY: "gpu_bound"}, None, "cpu_bound", "invalid"),
        ({"app": "x"}, None, "cpu_bound", "default"),
    ],
)
async def test_workload_class_from_label_annotation_or_default(
    harness: Harness, labels: dict[str, str], annotations: dict[str, str] | None, expected: str, source: str
) -> None:
    feed(harness.store, "node-a", MEMBW)
    status, body = await harness.post("/prioritize", args(labels=labels, annotations=annotations))
    assert status == 200
    _, last = await harness.get("/debug/last")
    assert (last["prioritize"]["workload_class"], last["prioritize"]["workload_class_source"]) == (expected, source)
    expected_score = {"memory_bound": 4, "llc_sensitive": 6, "cpu_bound": 9}[expected]
    assert body[0] == {"Host": "node-a", "Score": expected_score}


async def test_stale_and_unknown_nodes_are_neutral(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW, age_s=600)  # far past the 120 s bound
    status, body = await harness.post("/prioritize", args())
    assert status == 200
    assert body == [{"Host": "node-a", "Score": 5}, {"Host": "node-b", "Score": 5}]
    status, verdict = await harness.post("/filter", args())
    assert verdict["NodeNames"] == ["node-a", "node-b"]
    assert verdict["FailedNodes"] == {}
    _, debug = await harness.get("/debug/nodes?class=memory_bound&node=node-a")
    assert debug["nodes"]["node-a"]["memory_bound"]["regime"]["status"] == "stale"
    assert debug["nodes"]["node-a"]["memory_bound"]["regime"]["age_ms"] == 600_000


async def test_lower_case_field_names_are_accepted(harness: Harness) -> None:
    doc = args()
    body = {"pod": doc["Pod"], "nodenames": ["node-b"]}
    status, scores = await harness.post("/prioritize", body)
    assert status == 200
    assert scores == [{"Host": "node-b", "Score": 5}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (orjson.dumps({"NodeNames": ["a"]}), "Pod is missing"),
        (orjson.dumps({"Pod": {}, "Nodes": None, "NodeNames": None}), "neither NodeNames nor Nodes"),
        (orjson.dumps({"Pod": {}, "NodeNames": "node-a"}), "list of strings"),
        (orjson.dumps({"Pod": {}, "NodeNames": [["node-a"]]}), "list of strings"),
        (orjson.dumps({"Pod": {}, "NodeNames": [7]}), "list of strings"),
        (orjson.dumps({"Pod": {"metadata": []}, "NodeNames": []}), "must be objects"),
        (orjson.dumps({"Pod": {"metadata": {"labels": "x"}}, "NodeNames": []}), "must be objects"),
    ],
)
async def test_bad_requests_are_400_with_an_error(harness: Harness, body: bytes, message: str) -> None:
    for verb in ("/filter", "/prioritize"):
        status, answer = await harness.post(verb, body)
        assert status == 400
        assert message in answer["Error"]


async def test_debug_nodes_explains_every_class(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW, risk=0.3)
    status, debug = await harness.get("/debug/nodes")
    assert status == 200
    assert debug["nodes_held"] == 1
    node = debug["nodes"]["node-a"]
    assert set(node) == set(WORKLOAD_CLASSES)
    assert node["memory_bound"]["filtered"].startswith("memory_bound slowdown 2.40 >= 1.50 (regime membw")
    assert node["cpu_bound"]["filtered"] is None
    assert node["cpu_bound"]["risk"] == {"probability": 0.3, "horizon_s": 600, "status": "fresh", "age_ms": 0}
    assert debug["config"]["max_slowdown"] == 1.5
    assert debug["class_key"] == DEFAULT_CLASS_KEY
    status, _ = await harness.get("/debug/nodes?class=gpu_bound")
    assert status == 400


async def test_prioritize_span_shows_each_nodes_inputs_and_score(harness: Harness) -> None:
    feed(harness.store, "node-a", MEMBW)
    await harness.post("/prioritize", args())
    await harness.post("/filter", args())
    await wait_until(lambda: len(harness.spans.get_finished_spans()) == 2, timeout=5, what="two spans")
    spans = {s.name: s for s in harness.spans.get_finished_spans()}
    prio = spans[names.SPAN_EXTENDER_PRIORITIZE].attributes or {}
    assert prio[names.EXTENDER_POD] == "e2e-capture-RUNID/web-0"
    assert prio[names.EXTENDER_WORKLOAD_CLASS] == "memory_bound"
    assert prio[names.EXTENDER_NODES] == 2
    assert prio[names.EXTENDER_NODES_UNKNOWN] == 1
    assert list(prio[names.EXTENDER_NODE_NAMES]) == ["node-a", "node-b"]  # type: ignore[arg-type]
    assert list(prio[names.EXTENDER_NODE_SCORES]) == [4, 5]  # type: ignore[arg-type]
    inputs = [str(i) for i in prio[names.EXTENDER_NODE_INPUTS]]  # type: ignore[union-attr]
    assert inputs[0].startswith("score=4 regime=membw@0.90 slowdown=2.40 risk=0.00 anomaly=0.00")
    assert inputs[1] == "score=5 regime=unknown slowdown=? risk=unknown anomaly=unknown"
    filt = spans[names.SPAN_EXTENDER_FILTER].attributes or {}
    assert list(filt[names.EXTENDER_NODE_VERDICTS]) == [SEVERE_MEMBW, "pass"]  # type: ignore[arg-type]
    assert filt[names.EXTENDER_FILTERED] == 1


async def test_span_detail_is_capped(harness: Harness) -> None:
    harness.server.span_detail_max_nodes = 1
    await harness.post("/prioritize", args())
    await wait_until(lambda: harness.spans.get_finished_spans(), timeout=5, what="a span")
    attrs = harness.spans.get_finished_spans()[0].attributes or {}
    assert attrs[names.EXTENDER_DETAIL_TRUNCATED] is True
    assert list(attrs[names.EXTENDER_NODE_NAMES]) == ["node-a"]  # type: ignore[arg-type]


async def test_bad_request_span_is_an_error(harness: Harness) -> None:
    await harness.post("/prioritize", b"{")
    await wait_until(lambda: harness.spans.get_finished_spans(), timeout=5, what="a span")
    span = harness.spans.get_finished_spans()[0]
    assert not span.status.is_ok
    assert "not JSON" in str((span.attributes or {})[names.ERROR_MESSAGE])


# ---------------------------------------------------------------- settings and wiring


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXTENDER_PORT", "9999")
    monkeypatch.setenv("EXTENDER_STALENESS_S", "30")
    monkeypatch.setenv("EXTENDER_DEFAULT_CLASS", "memory_bound")
    monkeypatch.setenv("EXTENDER_PATH_PREFIX", "/scheduler")
    settings = load_settings(ExtenderSettings)
    assert (settings.host, settings.port, settings.default_class) == ("127.0.0.1", 9999, "memory_bound")
    assert scoring_config(settings).staleness_ms == 30_000
    extender, server, _reader = build(settings)
    assert extender.default_class == "memory_bound"
    paths = {r.resource.canonical for r in server.app.router.routes() if r.resource is not None}
    assert {"/scheduler/filter", "/scheduler/prioritize", "/scheduler/debug/nodes", "/scheduler/debug/last"} <= paths


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("EXTENDER_DEFAULT_CLASS", "gpu_bound"),
        ("EXTENDER_MAX_SLOWDOWN", "1.0"),
        ("EXTENDER_RISK_THRESHOLD", "2"),
        ("EXTENDER_POLICY", "learned-serve"),
    ],
)
def test_bad_setting_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], var: str, value: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError):
        load_settings(ExtenderSettings)
    assert f"setting {var}:" in capsys.readouterr().err


def test_policy_defaults_to_the_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(ExtenderSettings).policy == "heuristic"
    monkeypatch.setenv("EXTENDER_POLICY", "learned")
    monkeypatch.setenv("MODEL_POLL_S", "0.5")
    settings = load_settings(ExtenderSettings)
    assert (settings.policy, settings.model_poll_s) == ("learned", 0.5)
    assert settings.placement_model_dir.name == "placement"


async def test_prioritize_is_shadowed_after_the_answer(harness: Harness) -> None:
    from featurelib.placement import PlacementModel
    from services.scheduler_extender.podindex import PodIndex
    from services.scheduler_extender.shadow import Shadow

    status, body = await harness.get("/debug/shadow")
    assert (status, body["policy"]) == (200, "heuristic")
    feed(harness.store, "node-a", MEMBW, age_s=5)
    feed(harness.store, "node-b", CALM, regime="none", age_s=5)
    index = PodIndex(class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    capacity = {"cpu": "16", "memory": "64Gi"}
    index.replace_nodes([{"metadata": {"name": n}, "status": {"allocatable": capacity}} for n in ("node-a", "node-b")])
    # the table prefers the contended node-a; the heuristic (which answers) prefers node-b
    model = PlacementModel("extender+pods", {"2|0|membw|2|3|e|0|0000": 1.0, "2|0|none|2|0|e|0|0000": -1.0})
    harness.server.shadow = Shadow(harness.store, index, lambda: model, staleness_ms=120_000)
    harness.server.shadow_version = lambda: "v-test"
    status, scores = await harness.post("/prioritize", args())
    assert status == 200 and scores[0]["Score"] < scores[1]["Score"]
    shadow = harness.server.shadow
    await wait_until(lambda: shadow.idle, what="the shadow to score the call")
    assert shadow.gate.in_flight == 0  # the handler left the gate: shadow work is not held back
    status, body = await harness.get("/debug/shadow")
    (recent,) = body["recent"]
    assert (body["mode"], body["model_version"], body["decisions"]["false"]) == ("shadow", "v-test", 1)
    assert (recent["heuristic_node"], recent["learned_node"], recent["agree"]) == ("node-b", "node-a", False)
    (span,) = [s for s in harness.spans.get_finished_spans() if s.name == names.SPAN_EXTENDER_PRIORITIZE]
    assert recent["trace_id"] == f"{span.context.trace_id:032x}"
    _, one = await harness.get("/debug/shadow?node=node-a")
    assert (one["known"]["allocatable_milli_cpu"], one["known"]["pods"]) == (16000, 0)
    _, none = await harness.get("/debug/shadow?node=node-x")
    assert none == {"node": "node-x", "known": None}


async def test_server_binds_and_stops() -> None:
    store = NodeStateStore(ScoringConfig())
    server = ExtenderServer(
        Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound"), host="127.0.0.1", port=0
    )
    await server.start()
    try:
        assert server.running
        assert server.bound_port
    finally:
        await server.stop()
    assert not server.running


async def test_a_calls_span_links_the_messages_behind_the_deciding_nodes(harness: Harness) -> None:
    """Placements are traceable: prioritize links the regime / anomaly / risk messages of its top-scored nodes,
    filter those of the nodes it filtered out (their traceparents as the extender read them from Kafka)."""
    feed(harness.store, "node-a", MEMBW)
    trace_id, regime_span, risk_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "00f067aa0ba902b8"
    label = RegimeLabelV2(node="node-a", ts_ms=NOW, regime="membw", confidence=0.9, raw_regime="membw",
                          changed=False, interference=MEMBW, model_version="m", input_ts_ms=NOW)
    harness.store.apply(label, NOW, f"00-{trace_id}-{regime_span}-01".encode())
    risk = FailureRiskV2(target_kind="node", target="node-a", ts_ms=NOW, model_version="m", input_ts_ms=NOW,
                         horizons=[HorizonRisk(horizon_s=600, probability=0.0)])
    harness.store.apply(risk, NOW, f"00-{trace_id}-{risk_span}-01".encode())
    assert harness.store.traces("node-a") == (f"00-{trace_id}-{regime_span}-01".encode(), None,
                                              f"00-{trace_id}-{risk_span}-01".encode())
    await harness.post("/prioritize", args())
    await harness.post("/filter", args())
    await wait_until(lambda: len(harness.spans.get_finished_spans()) == 2, timeout=5, what="two spans")
    spans = {s.name: s for s in harness.spans.get_finished_spans()}
    for name in (names.SPAN_EXTENDER_PRIORITIZE, names.SPAN_EXTENDER_FILTER):  # node-a is top-scored and filtered
        links = {(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"): dict(link.attributes or {})
                 for link in spans[name].links}
        assert links == {
            (trace_id, regime_span): {names.NODE_NAME: "node-a", "borg.extender.input": "regime"},
            (trace_id, risk_span): {names.NODE_NAME: "node-a", "borg.extender.input": "risk"},
        }, name
    # a tombstone drops the input and its link
    harness.store.forget("regimes.v2", "node-a", NOW)
    assert harness.store.traces("node-a")[0] is None


async def test_a_placement_links_the_decisions_that_shaped_it(harness: Harness) -> None:
    """The referee's last action on a top-scored node, and the eviction whose replacement is being placed
    (same ReplicaSet), are linked from the extender's span: a placement leads back to those decisions."""
    from contracts.models import ActionResult, TargetRef
    from services.scheduler_extender.state import replica_set_of

    feed(harness.store, "node-a", MEMBW)
    trace_id, node_span, evict_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902c1", "00f067aa0ba902c2"
    consolidated = ActionResult(decision_id="d-1", ts_ms=NOW, target=TargetRef(kind="Node", name="node-a"),
                                action="consolidate", outcome="applied", message="ok")
    evicted = ActionResult(decision_id="d-2", ts_ms=NOW,
                           target=TargetRef(kind="Pod", name="web-5d8f7c9b4-x2k9q", namespace="ns"),
                           action="evict", outcome="applied", message="ok")
    refused = ActionResult(decision_id="d-3", ts_ms=NOW, target=TargetRef(kind="Node", name="node-b"),
                           action="taint", outcome="refused", message="cooldown")
    assert harness.store.note_action(consolidated, f"00-{trace_id}-{node_span}-01".encode())
    assert harness.store.note_action(evicted, f"00-{trace_id}-{evict_span}-01".encode())
    assert not harness.store.note_action(refused, f"00-{trace_id}-{evict_span}-01".encode()), "not carried out"
    assert replica_set_of("web-5d8f7c9b4-x2k9q") == "web-5d8f7c9b4" and replica_set_of("web-0") is None
    body = args()
    body["Pod"]["metadata"]["namespace"] = "ns"
    body["Pod"]["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                   "name": "web-5d8f7c9b4", "uid": "u", "controller": True}]
    await harness.post("/prioritize", body)
    await wait_until(lambda: len(harness.spans.get_finished_spans()) == 1, timeout=5, what="the span")
    (span,) = harness.spans.get_finished_spans()
    links = {f"{link.context.span_id:016x}": dict(link.attributes or {}) for link in span.links}
    assert links[node_span] == {names.NODE_NAME: "node-a", "borg.extender.input": "decision"}
    assert links[evict_span] == {"borg.extender.input": "eviction"}
    # a pod of another controller is not linked to that eviction
    harness.spans.clear()
    body["Pod"]["metadata"]["ownerReferences"][0]["name"] = "api-7c9f8d6b5"
    await harness.post("/prioritize", body)
    await wait_until(lambda: len(harness.spans.get_finished_spans()) == 1, timeout=5, what="the span")
    assert evict_span not in {f"{link.context.span_id:016x}" for link in harness.spans.get_finished_spans()[0].links}
