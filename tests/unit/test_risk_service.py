"""Risk service logic without a broker: provisional model, state, aggregation, backends, refusal.

``train_provisional_failure_model`` trains a small XGBoost model per horizon on a synthetic
task-event stream (failures depend on the machine and on prior evictions), exports it to
ONNX exactly like the real failure model's layout (``horizon_<H>s.onnx`` + ``model_card.json``
+ ``CURRENT``) and also saves the boosters. The integration tests use it until
``models/failure`` ships; nothing here is a hard-coded output.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import onnxmltools
import orjson
import pytest
import xgboost as xgb
from onnxmltools.convert.common.data_types import FloatTensorType

from contracts import TaskEvent
from featurelib.node.schema import FEATURE_INDEX, N_FEATURES, node_feature_schema_hash
from featurelib.task_features import TASK_FEATURE_NAMES, TaskHistory, task_feature_schema_hash
from services.risk.aggregate import node_probability
from services.risk.model import MODEL_KIND, load_failure_model
from services.risk.state import RiskState, to_history_event
from services.runtime.model_watch import ModelRefusedError, resolve

HORIZONS = (300, 900, 3600)
T0_MS = 1_700_000_000_000
NODE_USED = ("cpu_util_mean_10s", "ipc_mean_10s", "membw_gbs_mean_10s")


def synthetic_task_events(n_jobs: int = 60, seed: int = 0, machines: int = 12) -> list[TaskEvent]:
    """Jobs of tasks scheduled on machines; machines 0-2 are flaky, evicted tasks fail more."""
    rng = np.random.default_rng(seed)
    out: list[TaskEvent] = []
    for j in range(n_jobs):
        start = int(rng.integers(0, 3_000_000))
        for t in range(int(rng.integers(2, 6))):
            tid = f"job{j}-{t}"
            ts = start + int(rng.integers(0, 60_000))
            base: dict[str, Any] = {"task_id": tid, "job_id": f"job{j}", "task_index": t, "source": "synthetic",
                    "user": f"u{j % 5}", "priority": int(rng.integers(0, 10)), "cpu_request": 0.1,
                    "memory_request": 0.05, "scheduling_class": int(rng.integers(0, 4))}
            out.append(TaskEvent(ts_ms=T0_MS + ts, event="SUBMIT", **base))
            for _attempt in range(3):
                m = int(rng.integers(0, machines))
                ts += int(rng.integers(1_000, 30_000))
                out.append(TaskEvent(ts_ms=T0_MS + ts, event="SCHEDULE", machine=f"m{m}", **base))
                p_fail = 0.6 if m < 3 else 0.1
                ts += int(rng.integers(60_000, 4_000_000))
                r = rng.random()
                end = "FAIL" if r < p_fail else ("EVICT" if r < p_fail + 0.15 else "FINISH")
                out.append(TaskEvent(ts_ms=T0_MS + ts, event=end, machine=f"m{m}", **base))  # type: ignore[arg-type]
                if end == "FINISH":
                    break
                out.append(TaskEvent(ts_ms=T0_MS + ts + 1, event="SUBMIT", **base))
                ts += 1
    return sorted(out, key=lambda e: e.ts_ms)


def _points(events: list[TaskEvent], with_node: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows at every SCHEDULE (+ a point mid-run) and labels per horizon."""
    rng = np.random.default_rng(seed)
    history = TaskHistory()
    ends: dict[str, list[tuple[int, str]]] = {}
    for e in events:
        if e.event in ("FAIL", "EVICT", "FINISH", "KILL", "LOST"):
            ends.setdefault(e.task_id, []).append((e.ts_ms, e.event))
    rows, labels = [], []
    for e in events:
        history.observe(to_history_event(e))
        if e.event != "SCHEDULE":
            continue
        nxt = next(((t, k) for t, k in ends.get(e.task_id, []) if t > e.ts_ms), None)
        for offset_ms in (0, 120_000):
            now = e.ts_ms + offset_ms
            if nxt is not None and nxt[0] <= now:
                continue
            row = history.features((e.job_id, e.task_index), now * 1000)
            if with_node:
                flaky = e.machine in ("m0", "m1", "m2")
                row = [*row, float(np.clip(rng.normal(0.9 if flaky else 0.4, 0.1), 0, 1)), float(rng.normal(1.2, 0.2)),
                       float(rng.normal(20, 5))]
            rows.append(row)
            labels.append([1.0 if nxt is not None and nxt[1] == "FAIL" and nxt[0] - now <= h * 1000 else 0.0
                           for h in HORIZONS])
    return np.asarray(rows, dtype=np.float32), np.asarray(labels)


def train_provisional_failure_model(root: Path, *, version: str = "provisional-1", with_node: bool = True,
                                    seed: int = 0, boosters: bool = True) -> Path:
    """Train, export and publish a small failure model under ``root/version``; returns the version dir."""
    x, y = _points(synthetic_task_events(seed=seed), with_node, seed)
    out = root / version
    out.mkdir(parents=True)
    sha = {}
    width = x.shape[1]
    for j, h in enumerate(HORIZONS):
        booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "nthread": 1,
                             "seed": seed}, xgb.DMatrix(x, label=y[:, j]), 25)
        onx = onnxmltools.convert_xgboost(booster, initial_types=[("input", FloatTensorType([None, width]))],
                                          target_opset=15)
        path = out / f"horizon_{h}s.onnx"
        path.write_bytes(onx.SerializeToString())
        sha[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        if boosters:
            booster.save_model(str(out / f"horizon_{h}s.ubj"))
    features: dict[str, Any] = {"names": list(TASK_FEATURE_NAMES), "schema_hash": task_feature_schema_hash()}
    if with_node:
        features["node_features"] = {"schema_hash": node_feature_schema_hash(), "used": list(NODE_USED)}
    card = {"model": MODEL_KIND, "version": version, "created": dt.datetime.now(dt.UTC).isoformat(),
            "training_command": "tests/unit/test_risk_service.py::train_provisional_failure_model",
            "features": features, "label": {"horizons_s": list(HORIZONS)},
            "onnx": {"sha256": sha, "input_name": "input"},
            "metrics": {"note": "provisional test model on synthetic events", "rows": len(x),
                        "positive_rate": y.mean(axis=0).tolist()}}
    (out / "model_card.json").write_bytes(orjson.dumps(card))
    (root / "CURRENT").write_text(version + "\n")
    return out


@pytest.fixture(scope="module")
def provisional(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_provisional_failure_model(tmp_path_factory.mktemp("failure"))


def test_provisional_model_learns_the_synthetic_signal(provisional: Path) -> None:
    model = load_failure_model(provisional)
    assert model.horizons_s == HORIZONS and model.uses_node_features
    x, _y = _points(synthetic_task_events(seed=5), True, 5)
    (probs,) = model(x)
    assert probs.shape == (len(x), 3)
    # longer horizons can only catch more failures
    assert probs[:, 2].mean() >= probs[:, 0].mean() - 0.02
    flaky = x[:, len(TASK_FEATURE_NAMES)] > 0.7
    assert probs[flaky, 2].mean() > probs[~flaky, 2].mean()


def test_backends_agree_and_are_chosen_by_batch_size(provisional: Path) -> None:
    model = load_failure_model(provisional, xgb_min_batch=50)
    x, _ = _points(synthetic_task_events(seed=6), True, 6)
    assert model.backend_for(1) == "onnxruntime" and model.backend_for(len(x)) == "xgboost"
    (big,) = model(x)  # xgboost
    small = np.concatenate([model(x[i : i + 1])[0] for i in range(len(x))])  # onnxruntime
    np.testing.assert_allclose(big, small, atol=1e-5)


def test_model_with_another_feature_schema_is_refused(tmp_path: Path) -> None:
    vdir = train_provisional_failure_model(tmp_path, boosters=False)
    card = orjson.loads((vdir / "model_card.json").read_bytes())
    card["features"]["schema_hash"] = "0" * 64
    (vdir / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match="feature schema"):
        load_failure_model(resolve(tmp_path))


def test_node_schema_mismatch_is_refused(tmp_path: Path) -> None:
    vdir = train_provisional_failure_model(tmp_path, boosters=False)
    card = orjson.loads((vdir / "model_card.json").read_bytes())
    card["features"]["node_features"]["schema_hash"] = "f" * 64
    (vdir / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match="node feature schema"):
        load_failure_model(vdir)


def test_state_tracks_running_tasks_per_node() -> None:
    state = RiskState()
    base: dict[str, Any] = {"job_id": "j", "task_index": 0, "source": "synthetic"}
    c = state.observe(TaskEvent(task_id="t0", ts_ms=T0_MS, event="SUBMIT", **base))  # type: ignore[arg-type]
    assert not c.running
    c = state.observe(TaskEvent(task_id="t0", ts_ms=T0_MS + 5, event="SCHEDULE", machine="m1", **base))  # type: ignore[arg-type]
    assert c.running and c.node_after == "m1" and state.by_node == {"m1": {"t0"}}
    assert state.task_rows(["t0"]).shape == (1, len(TASK_FEATURE_NAMES))
    c = state.observe(TaskEvent(task_id="t0", ts_ms=T0_MS + 9, event="UPDATE_RUNNING", **base))  # type: ignore[arg-type]
    assert c.running
    c = state.observe(TaskEvent(task_id="t0", ts_ms=T0_MS + 20, event="EVICT", machine="m1", **base))  # type: ignore[arg-type]
    assert c.terminal and not c.running and c.node_before == "m1" and not state.by_node


def test_node_probability_is_any_task_failing() -> None:
    assert node_probability([], 2) == [0.0, 0.0]
    assert node_probability([(0.5, 0.2)], 2) == pytest.approx([0.5, 0.2])
    p = node_probability([(0.5, 0.1), (0.5, 0.1)], 2)
    assert p == pytest.approx([0.75, 0.19])
    assert p[0] >= 0.5  # never below the worst task


def test_node_feature_columns_follow_the_card(provisional: Path) -> None:
    model = load_failure_model(provisional)
    assert [int(c) for c in model.node_columns] == [FEATURE_INDEX[n] for n in NODE_USED]
    assert model.width == len(TASK_FEATURE_NAMES) + len(NODE_USED) and max(model.node_columns) < N_FEATURES


# ---------------------------------------------------------------------------------- processor (no broker)


def _event(topic: str, key: str, value: bytes, offset: int, trace_hex: str | None) -> Any:
    from types import SimpleNamespace

    headers = [("traceparent", f"00-{trace_hex}-{'1' * 16}-01".encode())] if trace_hex else []
    msg = SimpleNamespace(topic=topic, partition=0, offset=offset, key=key.encode(), value=value, headers=headers,
                          timestamp=T0_MS / 1000)
    return SimpleNamespace(message=msg)


class _Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, list[tuple[str, bytes]]]] = []
        self.topics: list[str] = []
        self.letters: list[tuple[str, str]] = []

    async def send(self, base: str, key: str, value: Any, ctx: Any) -> None:
        from contracts.headers import build_headers

        self.sent.append((key, value, build_headers(base, ctx)))
        self.topics.append(base)

    async def changelog(self, *args: Any) -> None:
        return None

    async def changelog_many(self, *args: Any) -> None:
        return None

    async def dead_letter(self, event: Any, error: str, kind: str) -> None:
        self.letters.append((kind, error))

    async def flush(self) -> None:
        return None


def test_risk_joins_node_features_with_span_links(provisional: Path) -> None:
    import asyncio

    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from contracts import FeatureVector, encode
    from contracts.headers import trace_id_of
    from services.risk.processor import RiskProcessor
    from services.risk.settings import RiskSettings
    from services.runtime.model_watch import ModelWatcher
    from services.runtime.telemetry import setup_tracing

    setup_tracing("test", None)
    exporter = InMemorySpanExporter()
    trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[attr-defined]
    sink = _Sink()
    watcher = ModelWatcher("failure", provisional.parent, load_failure_model, poll_s=60)
    proc = RiskProcessor(RiskSettings(rebuild_history=False), sink, watcher)  # type: ignore[arg-type]
    node_trace, task_trace = "a" * 32, "b" * 32
    values = [0.5] * N_FEATURES
    fv = FeatureVector(node="m1", ts_ms=T0_MS + 10_000, window_s=10, schema_hash=node_feature_schema_hash(),
                       values=values, valid=[True] * N_FEATURES, samples=10, input_ts_ms=T0_MS)
    asyncio.run(proc.handle_features(_event("p-features.v1", "m1", encode(fv), 0, node_trace)))
    base: dict[str, Any] = {"job_id": "j1", "task_index": 0, "source": "synthetic"}
    events = [TaskEvent(task_id="t1", ts_ms=T0_MS + 11_000, event="SUBMIT", **base),
              TaskEvent(task_id="t1", ts_ms=T0_MS + 12_000, event="SCHEDULE", machine="m1", **base)]
    asyncio.run(proc.handle_tasks([_event("p-taskevents.v1", "t1", encode(e), i, task_trace)
                                   for i, e in enumerate(events)]))
    keys = [k for k, _, _ in sink.sent]
    assert keys == ["task:t1", "node:m1"] and sink.topics == ["risk.v2", "risk.v2"]
    task_risk, node_risk = sink.sent[0][1], sink.sent[1][1]
    assert task_risk.target_kind == "task" and task_risk.node == "m1"
    assert node_risk.target_kind == "node" and node_risk.tasks == 1
    assert task_risk.out_of_range == [] and node_risk.tasks_out_of_range == 0  # synthetic source, no card ranges
    assert [h.probability for h in node_risk.horizons] == pytest.approx([h.probability for h in task_risk.horizons])
    assert trace_id_of(sink.sent[0][2]) == task_trace  # continues the task event's trace
    spans = [s for s in exporter.get_finished_spans() if s.name == "risk infer"]
    assert spans and any(link.context.trace_id == int(node_trace, 16) for link in spans[0].links), \
        "the join with the node's features must be a span link"
    # the task fails: a final zero record for the task and the node loses it
    fail = TaskEvent(task_id="t1", ts_ms=T0_MS + 20_000, event="FAIL", machine="m1", **base)
    asyncio.run(proc.handle_tasks([_event("p-taskevents.v1", "t1", encode(fail), 5, task_trace)]))
    final_task, final_node = sink.sent[-2][1], sink.sent[-1][1]
    assert all(h.probability == 0.0 for h in final_task.horizons)
    assert final_node.tasks == 0 and all(h.probability == 0.0 for h in final_node.horizons)
    asyncio.run(proc.handle_tasks([_event("p-taskevents.v1", "x", b"{oops", 6, None)]))
    assert sink.letters and sink.letters[-1][0] == "malformed"
