"""Risk shadow scoring and rollout: the candidate scores the same tasks on its own columns; it answers
for the nodes of its step; outputs name the version and carry the rollout header."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contracts import FeatureVector, TaskEvent, decode, encode
from contracts.models import FailureRiskV2
from featurelib.node.schema import N_FEATURES, node_feature_schema_hash
from services.risk.model import FailureModel, load_failure_model
from services.risk.processor import RiskProcessor
from services.risk.settings import RiskSettings
from services.risk.shadow import RiskShadowStats, spearman
from services.runtime import rollout
from services.runtime.model_watch import ModelWatcher
from services.runtime.rollout import RolloutState, node_bucket
from services.runtime.rollout_watch import HEADER, RolloutWatcher
from tests.unit.test_risk_service import T0_MS, _event, _Sink, train_provisional_failure_model


class Sink(_Sink):
    async def send_encoded(self, base: str, key: str, value: bytes, ctx: Any, *,
                           extra_headers: list[tuple[str, bytes]] | None = None) -> None:
        self.sent.append((key, decode(FailureRiskV2, value), list(extra_headers or [])))
        self.topics.append(base)


def test_stats_measure_delta_close_share_and_rank_agreement() -> None:
    stats = RiskShadowStats()
    cur = np.linspace(0.0, 0.9, 10).reshape(-1, 1).repeat(3, axis=1)
    stats.observe(cur, cur + 0.05)
    assert stats.agreement() == 1.0 and stats.summary()["mean_abs_delta"] == pytest.approx(0.05)
    assert stats.summary()["rank_agreement"] == pytest.approx(1.0)
    stats.observe(cur, cur[::-1])
    assert stats.summary()["rank_agreement"] == pytest.approx(0.0), "mean of +1 and -1"
    assert stats.agreement() == pytest.approx(12 / 20), "10 close, then 2 of the reversed 10"
    assert spearman(np.ones(4), np.arange(4.0)) is None


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("failure")
    train_provisional_failure_model(base, version="cand", with_node=False, seed=1, boosters=False)
    train_provisional_failure_model(base, version="cur", seed=0, boosters=False)  # writes CURRENT = cur
    return base


def run(root: Path, state: RolloutState, nodes: list[str]) -> tuple[Sink, RiskShadowStats]:
    rollout.write_state(root, state)
    models: ModelWatcher[FailureModel] = ModelWatcher("failure", root, load_failure_model, poll_s=60)
    stats = RiskShadowStats()
    settings = RiskSettings(rebuild_history=False)
    watcher = RolloutWatcher("failure", root, load_failure_model, stats, settings,
                             serving=lambda: models.version_dir.name)
    watcher.check()
    sink = Sink()
    proc = RiskProcessor(settings, sink, models, None, watcher, stats)  # type: ignore[arg-type]
    events = []
    for i, node in enumerate(nodes):
        fv = FeatureVector(node=node, ts_ms=T0_MS + 10_000, window_s=10, schema_hash=node_feature_schema_hash(),
                           values=[0.5] * N_FEATURES, valid=[True] * N_FEATURES, samples=10, input_ts_ms=T0_MS)
        asyncio.run(proc.handle_features(_event("p-features.v1", node, encode(fv), i, None)))
        base: dict[str, Any] = {"job_id": f"j{i}", "task_index": 0, "source": "synthetic"}
        events += [TaskEvent(task_id=f"t{i}", ts_ms=T0_MS + 11_000, event="SUBMIT", **base),
                   TaskEvent(task_id=f"t{i}", ts_ms=T0_MS + 12_000, event="SCHEDULE", machine=node, **base)]
    asyncio.run(proc.handle_tasks([_event("p-taskevents.v1", e.task_id, encode(e), i, None)
                                   for i, e in enumerate(events)]))
    asyncio.run(proc.rescore())
    return sink, stats


def test_candidate_answers_for_its_nodes_and_every_output_says_so(root: Path) -> None:
    nodes = [f"m{i}" for i in range(40)]
    state = RolloutState(kind="failure", candidate="cand", baseline="cur", status="running", step=1,
                         started_ms=1, step_started_ms=1)
    sink, stats = run(root, state, nodes)
    assert stats.compared >= len(nodes) and stats.failed == 0, "both models scored every task"
    assert stats.summary()["mean_abs_delta"] is not None
    for key, risk, headers in sink.sent:
        expected = "cand" if node_bucket(risk.node) < 0.5 else "cur"
        assert risk.model_version == expected, (key, risk.node)
        assert dict(headers)[HEADER] == b"cand;step=2/3;fraction=0.5;running"
    assert {r.model_version for _, r, _ in sink.sent} == {"cand", "cur"}
    # shadow only: every answer from the current model, still compared
    sink, stats = run(root, RolloutState(kind="failure", candidate="cand", baseline="cur", status="shadow",
                                         started_ms=2), nodes[:5])
    assert {r.model_version for _, r, _ in sink.sent} == {"cur"} and stats.compared >= 5
    sink, stats = run(root, RolloutState(kind="failure", candidate="cur", baseline="cur", status="running",
                                         started_ms=3), nodes[:2])
    assert stats.compared == 0 and all(HEADER not in dict(h) for _, _, h in sink.sent), "no candidate: as before"
