"""Regime and anomaly services without a broker: hysteresis, model cards, refusal, dead letters, batching.

The processors are driven with stand-in consumed events and a recording sink; the models are
trained in the test (quick simulator runs), never hard-coded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from contracts import AnomalyScore, FeatureVector, RegimeLabel, decode
from contracts.headers import build_headers, trace_id_of
from featurelib.node_features import N_FEATURES, node_feature_schema_hash
from services.anomaly.model import load_anomaly_model
from services.anomaly.processor import AnomalyProcessor
from services.anomaly.settings import AnomalySettings
from services.regime import hysteresis
from services.regime.model import load_regime_model
from services.regime.processor import RegimeProcessor
from services.regime.settings import RegimeSettings
from services.runtime.model_watch import ModelRefusedError, ModelWatcher, infer_rows, resolve
from services.runtime.telemetry import setup_tracing
from training.anomaly.cli import train_anomaly
from training.regime.cli import train_regime

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    assert train_regime(["--quick", "--no-alibaba", "-q", "--out", str(root / "regime"), "--version", "r1"]) == 0
    assert train_anomaly(["--quick", "-q", "--out", str(root / "anomaly"), "--version", "a1"]) == 0
    return root


# ---------------------------------------------------------------------------------- hysteresis


def test_hysteresis_needs_consecutive_windows() -> None:
    step = hysteresis.advance(None, "none", 1, windows=2)
    assert step.regime == "none" and step.changed
    seq = ["llc", "none", "llc", "llc", "llc", "membw", "llc"]
    reported, changes = [], []
    state = step.state
    for i, raw in enumerate(seq):
        step = hysteresis.advance(state, raw, i + 2, windows=2)
        state = step.state
        reported.append(step.regime)
        changes.append(step.changed)
    # one noisy window never flips it; two in a row do
    assert reported == ["none", "none", "none", "llc", "llc", "llc", "llc"]
    assert changes == [False, False, False, True, False, False, False]


def test_hysteresis_one_window_setting_follows_raw() -> None:
    state = hysteresis.advance(None, "none", 1, windows=1).state
    step = hysteresis.advance(state, "core", 2, windows=1)
    assert step.regime == "core" and step.changed


# ---------------------------------------------------------------------------------- stand-ins


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: float


@dataclass
class Ev:
    message: Msg


@dataclass
class RecordingSink:
    sent: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    letters: list[tuple[Msg, str, str]] = field(default_factory=list)
    changelog_writes: int = 0
    dead_lettered: int = 0

    async def send(self, base_topic: str, key: str, value: Any, ctx: Any) -> None:
        self.sent.append((base_topic, key, value, build_headers(base_topic, ctx)))

    async def changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.changelog_writes += 1

    async def changelog_many(self, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
        self.changelog_writes += len(records)

    async def dead_letter(self, event: Ev, error: str, kind: str) -> None:
        self.letters.append((event.message, error, kind))
        self.dead_lettered += 1

    async def flush(self) -> None:
        return None


def vector_event(node: str, ts: int, offset: int, values: list[float] | None = None,
                 schema: str | None = None, headers: list[tuple[str, bytes]] | None = None) -> Ev:
    rng = np.random.default_rng(offset)
    vals = values if values is not None else [float(v) for v in rng.uniform(0, 2, N_FEATURES)]
    fv = FeatureVector(node=node, ts_ms=ts, window_s=10, schema_hash=schema or node_feature_schema_hash(),
                       values=vals, valid=[True] * len(vals), samples=10, input_ts_ms=ts - 5)
    return Ev(Msg("p-features.v1", 0, offset, node.encode(), orjson.dumps(fv.model_dump(mode="json")),
                  headers or [], ts / 1000))


@pytest.fixture
def traced() -> Iterator[None]:
    setup_tracing("test", None)
    yield


def _regime(model_root: Path, **env: Any) -> tuple[RegimeProcessor, RecordingSink]:
    sink = RecordingSink()
    settings = RegimeSettings(**env)
    watcher = ModelWatcher("regime", model_root / "regime", load_regime_model, poll_s=60)
    return RegimeProcessor(settings, sink, watcher), sink  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- regime


def test_regime_batch_labels_dead_letters_and_keeps_trace(model_root: Path, traced: None) -> None:
    proc, sink = _regime(model_root)
    parent = build_headers("features.v1")  # no active span: no traceparent
    traceparent = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    events = [
        vector_event("n1", T0 + 10_000, 0, headers=traceparent),
        vector_event("n2", T0 + 10_000, 1),
        Ev(Msg("p-features.v1", 0, 2, b"x", b"{broken", parent, T0 / 1000)),
        vector_event("n3", T0 + 10_000, 3, schema="a" * 64),
        vector_event("n4", T0 + 10_000, 4, values=[0.5] * (N_FEATURES - 3)),
    ]
    asyncio.run(proc.handle_batch(events))
    labels = [decode(RegimeLabel, orjson.dumps(v.model_dump(mode="json"))) for _, _, v, _ in sink.sent]
    assert [lab.node for lab in labels] == ["n1", "n2"]
    for lab in labels:
        assert lab.changed and lab.model_version == "r1"
        assert set(lab.interference) == {"cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound"}
        assert all(1.0 <= s <= 100.0 for s in lab.interference.values())
    assert trace_id_of(sink.sent[0][3]) == "0af7651916cd43dd8448eb211c80319c"  # continued, not a new root
    kinds = sorted((m.offset, k) for m, _, k in sink.letters)
    assert kinds == [(2, "malformed"), (3, "schema"), (4, "schema")]
    assert "needs" in sink.letters[-1][1] or "needs" in sink.letters[-2][1]


def test_regime_replay_of_a_window_is_identical_and_hysteresis_not_advanced(model_root: Path) -> None:
    proc, sink = _regime(model_root, hysteresis_windows=3)
    first = [vector_event("n1", T0 + i * 10_000, i) for i in range(4)]
    asyncio.run(proc.handle_batch(first))
    before = [v for _, _, v, _ in sink.sent]
    asyncio.run(proc.handle_batch(first[1:3]))  # re-delivered after a crash
    again = [v for _, _, v, _ in sink.sent[len(before):]]
    assert again == before[1:3]
    asyncio.run(proc.handle_batch([vector_event("n1", T0 + 40_000, 9)]))
    assert sink.sent[-1][2].ts_ms == T0 + 40_000


def test_model_failure_is_isolated_to_its_row() -> None:
    def flaky(x: np.ndarray) -> tuple[np.ndarray]:
        if np.any(x[:, 0] > 1e6):
            raise RuntimeError("boom")
        out = x[:, 0].copy()
        out[x[:, 0] < 0] = np.nan
        return (out,)

    x = np.array([[1.0], [2e6], [-1.0], [3.0]])
    results, errors = infer_rows(flaky, x)
    assert [r is None for r in results] == [False, True, True, False]
    assert "boom" in errors[1] and "not finite" in errors[2]


def test_regime_model_with_another_schema_is_refused(model_root: Path, tmp_path: Path) -> None:
    import shutil

    target = tmp_path / "regime" / "r1"
    shutil.copytree(resolve(model_root / "regime"), target)
    card = orjson.loads((target / "model_card.json").read_bytes())
    card["features"]["schema_hash"] = "b" * 64
    (target / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match=r"feature schema .* retrain"):
        load_regime_model(target)


def test_model_hot_reload_swaps_only_valid_versions(model_root: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "regime"
    shutil.copytree(resolve(model_root / "regime"), root / "v1")
    (root / "CURRENT").write_text("v1\n")
    watcher = ModelWatcher("regime", root, load_regime_model, poll_s=60)
    assert watcher.current.version == "r1" and not watcher.check()
    shutil.copytree(root / "v1", root / "v2")
    card = orjson.loads((root / "v2" / "model_card.json").read_bytes())
    card["version"] = "r2"
    (root / "v2" / "model_card.json").write_bytes(orjson.dumps(card))
    (root / "CURRENT").write_text("v2\n")
    assert watcher.check() and watcher.current.version == "r2"
    shutil.copytree(root / "v1", root / "v3")
    card["features"]["schema_hash"] = "c" * 64
    (root / "v3" / "model_card.json").write_bytes(orjson.dumps(card))
    (root / "CURRENT").write_text("v3\n")
    assert not watcher.check() and watcher.current.version == "r2"  # refused, old one keeps serving


# ---------------------------------------------------------------------------------- anomaly


def test_anomaly_scores_batch_and_flags_outliers(model_root: Path) -> None:
    sink = RecordingSink()
    watcher = ModelWatcher("anomaly", model_root / "anomaly", load_anomaly_model, poll_s=60)
    proc = AnomalyProcessor(AnomalySettings(), sink, watcher)  # type: ignore[arg-type]
    model = watcher.current
    assert 0.0 < model.threshold < 1.0
    events = [vector_event(f"n{i}", T0 + 10_000, i) for i in range(5)]
    events.append(vector_event("bad", T0, 7, values=[1.0] * 5))
    asyncio.run(proc.handle_batch(events))
    scores = [v for _, _, v, _ in sink.sent]
    assert len(scores) == 5 and all(isinstance(s, AnomalyScore) for s in scores)
    assert all(0.0 <= s.score <= 1.0 and s.is_anomaly == (s.score >= s.threshold) for s in scores)
    assert [k for _, _, k in sink.letters] == ["schema"]
    # random vectors far outside the simulator's ranges score higher than the model's threshold
    assert max(s.score for s in scores) >= model.threshold


def test_service_refuses_a_mismatched_model_at_start_up(model_root: Path, tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    target = tmp_path / "bad"
    shutil.copytree(resolve(model_root / "regime"), target)
    card = orjson.loads((target / "model_card.json").read_bytes())
    card["features"]["schema_hash"] = "d" * 64
    (target / "model_card.json").write_bytes(orjson.dumps(card))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "REGIME_MODEL_DIR": str(target), "KAFKA_BOOTSTRAP": "127.0.0.1:1", "LOG_FORMAT": "text",
           "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "services.regime"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "was trained on feature schema dddddddddddd" in done.stderr
    assert "retrain" in done.stderr


def test_training_writes_versioned_artifacts_with_cards(model_root: Path) -> None:
    for kind, version in (("regime", "r1"), ("anomaly", "a1")):
        root = model_root / kind
        assert (root / "CURRENT").read_text().strip() == version
        card = orjson.loads((root / version / "model_card.json").read_bytes())
        assert card["model"] == kind and card["version"] == version
        assert card["features"]["schema_hash"] == node_feature_schema_hash()
        assert card["training_command"].startswith(f"borgctl train {kind}")
        assert card["metrics"] and card["onnx"]["sha256"]
    regime = orjson.loads((model_root / "regime" / "r1" / "model_card.json").read_bytes())
    held = regime["metrics"]["heldout_kinds"]
    assert set(regime["data"]["heldout_kinds"]).isdisjoint(regime["data"]["train_kinds"])
    assert held["windows"] > 0 and held["accuracy"] > held["chance_accuracy"]  # better than guessing, unseen kinds
    anomaly = orjson.loads((model_root / "anomaly" / "a1" / "model_card.json").read_bytes())
    assert anomaly["metrics"]["injected_anomalies"]["roc_auc"] > 0.6


def test_shipped_models_match_the_feature_schema() -> None:
    """`make run` on a fresh clone serves the committed models: they must load with this code."""
    root = Path(__file__).resolve().parents[2] / "models"
    assert load_regime_model(resolve(root / "regime")).version
    assert load_anomaly_model(resolve(root / "anomaly")).version
