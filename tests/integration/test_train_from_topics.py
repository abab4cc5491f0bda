"""Real Kafka: ``borgctl train regime|failure --from-topics --quick`` turns what the topics recorded into a candidate.

Regime: a short synthetic recording (8 simulated nodes, 900 s at 1 Hz; the features stage's windows
computed by ``featurelib`` as the stage does, produced to features.v1; the simulator's ground truth
as ``borgctl replay --truth-out`` writes it). Failure: a synthetic Borg-like trace
(``training/synthetic_trace.py``) produced to taskevents.v1 as the cluster watcher would. Each run
must write a candidate that the serving stage's loader accepts and ``borgctl model status`` lists,
leave ``CURRENT`` where it was and append an ``ok`` result to ``trainer_runs.jsonl``.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from borgctl.model import status_lines
from contracts.models import TaskEvent
from loadtests.concept_traffic import regime_recording
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _copy_current(kind: str, root: Path) -> str:
    served = (ROOT / "models" / kind / "CURRENT").read_text().strip()
    shutil.copytree(ROOT / "models" / kind / served, root / kind / served)
    (root / kind / "CURRENT").write_text(served + "\n")
    return served


def _check_candidate(root: Path, kind: str, served: str) -> Path:
    assert (root / kind / "CURRENT").read_text().strip() == served, "CURRENT must not move"
    runs = [orjson.loads(line) for line in (root / kind / "trainer_runs.jsonl").read_bytes().splitlines()]
    assert runs[-1]["ok"] is True, runs[-1]
    candidate: Path = root / kind / str(runs[-1]["version"])
    assert candidate.is_dir() and candidate.name != served
    lines = status_lines(root)
    assert any(candidate.name in line and "*" not in line for line in lines), lines
    return candidate


async def test_regime_candidate_from_recorded_windows(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from services.regime.model import load_regime_model
    from training.from_topics_regime import train_regime_from_topics

    vectors, truth = regime_recording(nodes=8, ticks=900, seed=5)
    await produce_contracts(kafka_bootstrap, topic_prefix, "features.v1", [(v.node, v) for v in vectors])
    # a replayed record delivered twice counts once
    await produce_contracts(kafka_bootstrap, topic_prefix, "features.v1", [(v.node, v) for v in vectors[:50]])
    (tmp_path / "truth.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in truth))
    served = _copy_current("regime", tmp_path / "models")
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("BORG_TOPIC_PREFIX", topic_prefix)
    code = await asyncio.to_thread(train_regime_from_topics, [
        "--from-topics", "--truth", str(tmp_path / "truth.jsonl"), "--out", str(tmp_path / "models" / "regime"),
        "--train-fraction", "0.5", "--quick", "--quiet"])
    assert code == 0
    candidate = _check_candidate(tmp_path / "models", "regime", served)
    model = load_regime_model(candidate)  # the regime stage's loader: card, sha256s, abstention rules, smoke test
    card = model.card
    assert 0 < card["data"]["windows"] <= len(vectors)  # the 50 delivered twice are counted once
    split = card["data"]["split"]
    assert card["data"]["test_windows"] > 0 and split["gap_s"] == 300.0
    later = card["metrics"]["later_windows"]
    print(f"\nregime from topics: {card['data']['train_windows']} training / {card['data']['test_windows']} later "
          f"windows; accuracy candidate {later['candidate']['accuracy']:.3f}, "
          f"served {later['current']['accuracy']:.3f}")
    assert later["candidate"]["accuracy"] > later["candidate"]["chance_accuracy"]
    assert (candidate / "reference_profile.json").is_file()


async def test_failure_candidate_from_recorded_task_events(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from services.risk.model import load_failure_model
    from training.from_topics_failure import train_failure_from_topics
    from training.synthetic_trace import TRACE_START_US, SyntheticConfig, generate

    names = ("SUBMIT", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL", "LOST", "UPDATE_PENDING", "UPDATE_RUNNING")
    trace = generate(SyntheticConfig(seed=11, duration_s=10 * 3600, n_jobs=500))
    start_ms = 1_764_000_000_000
    # as `borgctl replay --source google2011` puts a trace on the topic: trace time kept in trace_time_us
    records = [TaskEvent(task_id=f"{e.job_id}-{e.task_index}", job_id=str(e.job_id), task_index=e.task_index,
                         ts_ms=start_ms + (e.time_us - TRACE_START_US) // 1000, trace_time_us=e.time_us,
                         event=names[e.event_type], source="google2011",  # type: ignore[arg-type]
                         machine=None if e.machine_id is None else f"m{e.machine_id}", user=e.user,
                         scheduling_class=e.scheduling_class, priority=e.priority, cpu_request=e.cpu_request,
                         memory_request=e.memory_request, disk_request=e.disk_request,
                         different_machines_restriction=None if e.different_machines_restriction is None
                         else bool(e.different_machines_restriction))
               for e in trace.task_events]
    await produce_contracts(kafka_bootstrap, topic_prefix, "taskevents.v1", [(r.task_id, r) for r in records])
    served = _copy_current("failure", tmp_path / "models")
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("BORG_TOPIC_PREFIX", topic_prefix)
    code = await asyncio.to_thread(train_failure_from_topics, [
        "--from-topics", "--out", str(tmp_path / "models" / "failure"), "--quick", "--quiet"])
    assert code == 0
    candidate = _check_candidate(tmp_path / "models", "failure", served)
    model = load_failure_model(candidate)  # the risk stage's loader
    assert model.version == candidate.name
    card = orjson.loads((candidate / "model_card.json").read_bytes())
    aucpr = {h: m["model"]["aucpr"] for h, m in card["metrics"]["horizons"].items()}
    rates = {h: m["positive_rate"] for h, m in card["metrics"]["horizons"].items()}
    print(f"\nfailure from topics: {len(records)} events; held-out AUCPR {aucpr} (positive rates {rates})")
    assert all(a is not None and a > rates[h] for h, a in aucpr.items())
