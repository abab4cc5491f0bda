"""Progressive rollout: node split, rollback rule, step machine, the stage's watcher and the operator commands."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from borgctl.main import main as borgctl
from borgctl.model import start, status_lines
from services.runtime import rollout
from services.runtime.model_watch import ModelRefusedError
from services.runtime.rollout import Comparison, Judgement, RolloutFields, RolloutState, judge, node_bucket
from services.runtime.rollout_watch import RolloutWatcher

NODES = [f"sim-{i:04d}" for i in range(10_000)]


def test_node_bucket_is_stable_uniform_and_nested() -> None:
    # pinned: a release that changed the hash would move nodes between models mid-rollout
    assert node_bucket("sim-0000") == pytest.approx(node_bucket("sim-0000"))
    assert f"{node_bucket('sim-0000'):.12f}" == "0.800708461581"
    for fraction in rollout.STEPS:
        share = sum(rollout.serves_candidate(n, fraction) for n in NODES) / len(NODES)
        assert abs(share - fraction) < 0.02, (fraction, share)
    at_10 = {n for n in NODES if rollout.serves_candidate(n, 0.1)}
    at_50 = {n for n in NODES if rollout.serves_candidate(n, 0.5)}
    assert at_10 < at_50, "a node served by the candidate at 10 % stays so at 50 %"
    assert all(rollout.serves_candidate(n, 1.0) for n in NODES)


def test_judge_rolls_back_only_on_enough_samples_and_more_than_the_margin() -> None:
    acc = Comparison("accuracy", 0.90, 0.84, 500)
    assert judge([acc], 0.9, 500, margin=0.05, min_samples=500).reason is not None
    assert judge([acc], 0.9, 500, margin=0.07, min_samples=500).reason is None, "within the margin"
    assert judge([replace(acc, samples=499)], 0.9, 500, margin=0.05, min_samples=500).reason is None, "too few"
    assert not judge([replace(acc, samples=499)], 0.9, 500, margin=0.05, min_samples=500).ready
    # a metric with its own margin; lower-is-better metrics turned the right way
    cov = Comparison("coverage", 0.30, 0.20, 900, margin=0.25)
    assert judge([cov], None, 900, margin=0.05, min_samples=500) == Judgement(
        None, True, {"coverage_current": 0.30, "coverage_candidate": 0.20})
    brier = Comparison("brier", 0.10, 0.20, 900, higher_is_better=False)
    assert "brier" in str(judge([brier], None, 900, margin=0.05, min_samples=500).reason)
    better = Comparison("accuracy", 0.80, 0.95, 900)
    assert judge([better], None, 900, margin=0.0, min_samples=500).reason is None
    # no labels: compared windows decide readiness; the agreement floor is the only guard
    assert judge([], 0.5, 499, margin=0.05, min_samples=500).ready is False
    assert judge([], 0.5, 500, margin=0.05, min_samples=500).reason is None
    assert "agreement" in str(judge([], 0.5, 500, margin=0.05, min_samples=500, min_agreement=0.8).reason)


def state(**kw: Any) -> RolloutState:
    return RolloutState(**{"kind": "regime", "candidate": "v2", "baseline": "v1", "status": "running",
                           "dwell_s": 10.0, "started_ms": 0, "step_started_ms": 0, **kw})


def test_step_machine_dwells_then_steps_then_promotes() -> None:
    ok, wait, bad = Judgement(None, True), Judgement(None, False), Judgement("worse", False)
    s = state()
    assert s.fraction == 0.1
    assert rollout.advance(s, 9_999, ok) is s, "dwell not over"
    assert rollout.advance(s, 20_000, wait) is s, "not enough samples"
    s = rollout.advance(s, 10_000, ok)
    assert (s.step, s.fraction, s.step_started_ms) == (1, 0.5, 10_000)
    assert rollout.dwell_remaining_s(s, 15_000) == 5.0
    s = rollout.advance(s, 20_000, ok)
    assert s.fraction == 1.0
    s = rollout.advance(s, 30_000, ok)
    assert s.status == "promoted" and s.fraction == 0.0
    assert rollout.advance(s, 99_000, bad) is s, "over is over"
    for held in ("paused", "shadow"):
        h = state(status=held, step=1)
        assert rollout.advance(h, 99_000, ok) is h
        assert rollout.advance(h, 99_000, bad).status == "rolled_back"
    assert state(status="paused", step=1).fraction == 0.5 and state(status="shadow").fraction == 0.0
    rolled = rollout.advance(state(step=1), 1, bad)
    assert (rolled.status, rolled.reason, rolled.fraction) == ("rolled_back", "worse", 0.0)


def test_state_round_trips_and_bad_files_mean_no_rollout(tmp_path: Path) -> None:
    s = state(step=2, reason="x")
    rollout.write_state(tmp_path, s)
    assert rollout.read_state(tmp_path) == s
    assert s.label() == "v2;step=3/3;fraction=1;running"
    (tmp_path / rollout.STATE_FILE).write_bytes(b"{")
    assert rollout.read_state(tmp_path) is None
    (tmp_path / rollout.STATE_FILE).write_bytes(orjson.dumps({**orjson.loads(s.to_json()), "steps": [0.5, 0.1]}))
    assert rollout.read_state(tmp_path) is None
    (tmp_path / rollout.STATE_FILE).write_bytes(orjson.dumps({**orjson.loads(s.to_json()), "candidate": "../x"}))
    assert rollout.read_state(tmp_path) is None


class Stats:
    def __init__(self) -> None:
        self.compared = 0
        self.labels_expected = False
        self.current, self.candidate, self.samples = 0.9, 0.9, 0

    def reset(self) -> None:
        self.compared = self.samples = 0

    def agreement(self) -> float | None:
        return 1.0 if self.compared else None

    def comparisons(self) -> list[Comparison]:
        return [Comparison("accuracy", self.current, self.candidate, self.samples)] if self.samples else []

    def summary(self) -> dict[str, Any]:
        return {"compared": self.compared}


def root_with(tmp_path: Path, *versions: str) -> Path:
    root = tmp_path / "regime"
    for v in versions:
        (root / v).mkdir(parents=True)
        (root / v / "model_card.json").write_bytes(orjson.dumps({"model": "regime", "version": v}))
    (root / "CURRENT").write_text(versions[0] + "\n")
    return root


def watcher(root: Path, stats: Stats, promoted: list[str]) -> RolloutWatcher[str]:
    def load(path: Path) -> str:
        if path.name == "refused":
            raise ModelRefusedError("another feature schema")
        return path.name

    return RolloutWatcher("regime", root, load, stats, RolloutFields(rollout_min_samples=10),
                          serving=lambda: rollout.current_version(root) or "",
                          promoted=lambda: promoted.append("reloaded"))


def test_watcher_steps_a_good_candidate_to_current(tmp_path: Path) -> None:
    root = root_with(tmp_path, "v1", "v2")
    stats, promoted = Stats(), []  # type: ignore[var-annotated]
    w = watcher(root, stats, promoted)
    w.check(0)
    assert w.live is None, "no rollout, no candidate: the stage costs what it did"
    start(root, "v2", progressive=True, dwell_s=1.0)
    t0 = rollout.read_state(root).step_started_ms  # type: ignore[union-attr]
    w.check(t0)
    assert w.live is not None and w.live.model == "v2" and w.live.state.fraction == 0.1
    assert w.live.headers == [("borg-rollout", b"v2;step=1/3;fraction=0.1;running")]
    w.check(t0 + 5_000)
    assert rollout.read_state(root).step == 0, "no samples yet"  # type: ignore[union-attr]
    stats.compared = stats.samples = 50
    for i in range(1, 4):
        w.check(t0 + 5_000 + i * 1_000)
    assert rollout.read_state(root).status == "promoted"  # type: ignore[union-attr]
    assert rollout.current_version(root) == "v2" and promoted == ["reloaded"] and w.live is None
    assert (root / "CURRENT.history").read_text() == "v1\n"
    assert [e["status"] for e in rollout.read_events(root)] == ["running", "running", "running", "promoted"]
    # the rollouts.v1 records waiting to be published: what the stage saw, then what it did
    moves = [(e.origin, e.previous_status, e.status, e.step, e.fraction) for e in w.events]
    assert moves == [("observed", None, "running", 1, 0.1), ("judged", "running", "running", 2, 0.5),
                     ("judged", "running", "running", 3, 1.0), ("judged", "running", "promoted", 3, 1.0)], moves
    assert {(e.model, e.candidate, e.baseline, e.rollout_id) for e in w.events} == {("regime", "v2", "v1", t0)}
    assert w.events[-1].compared == 50 and w.events[-1].reason == "every step passed"
    w.check(t0 + 99_000)
    assert len(w.events) == 4, "a state already published is not published again"
    assert (root / f"{rollout.SHADOW_PREFIX}{socket.gethostname()}.json").is_file()
    out = "\n".join(status_lines(tmp_path))
    assert "rollout of v2 (baseline v1): promoted, step 3/3" in out and "agreement 1.000 over 50 windows" in out, out


def test_watcher_rolls_back_a_worse_candidate_and_keeps_an_operators_change(tmp_path: Path) -> None:
    root = root_with(tmp_path, "v1", "v2", "refused")
    stats, promoted = Stats(), []  # type: ignore[var-annotated]
    w = watcher(root, stats, promoted)
    start(root, "v2", progressive=True, dwell_s=1.0)
    w.check()
    stats.samples, stats.candidate = 50, 0.5
    w.check()
    after = rollout.read_state(root)
    assert after is not None and after.status == "rolled_back" and "accuracy" in after.reason
    last = w.events[-1]
    assert (last.origin, last.status, last.previous_status, last.step) == ("judged", "rolled_back", "running", 1)
    assert last.reason == after.reason and last.metrics == {}
    assert w.live is None and rollout.current_version(root) == "v1"
    # rolled back once, it stays so in this process even if the file said otherwise (read-only root)
    rollout.write_state(root, replace(after, status="running"))
    w.check()
    assert w.live is None
    # an operator's pause between two polls is not overwritten by the stage
    (root / rollout.STATE_FILE).unlink()
    start(root, "v2", progressive=True, dwell_s=1.0)
    stats.candidate = 0.9
    w.check()
    s = rollout.read_state(root)
    assert s is not None
    assert borgctl(["model", "--models", str(tmp_path), "pause", "regime"]) == 0
    w._transition(s, rollout.advance(s, s.step_started_ms + 5_000, Judgement(None, True)), 0)
    assert rollout.read_state(root).status == "paused"  # type: ignore[union-attr]
    assert w.events[-1].status == "running", "a step the file no longer allowed is no event"
    w.check()
    assert (w.events[-1].origin, w.events[-1].status) == ("observed", "paused"), "the operator's pause is"
    # a candidate the stage cannot load is rolled back with the loader's reason
    (root / rollout.STATE_FILE).unlink()
    start(root, "refused", progressive=True, dwell_s=1.0)
    w.check()
    refused = rollout.read_state(root)
    assert refused is not None and refused.status == "rolled_back" and "another feature schema" in refused.reason


def test_operator_commands_mid_rollout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = root_with(tmp_path, "v1", "v2", "v3")
    models = ["model", "--models", str(tmp_path)]
    assert borgctl([*models, "shadow", "regime", "v2"]) == 0
    assert rollout.read_state(root).status == "shadow"  # type: ignore[union-attr]
    assert borgctl([*models, "promote", "regime", "v3", "--progressive"]) == 2, "one rollout at a time"
    assert "under way" in capsys.readouterr().err
    assert borgctl([*models, "promote", "regime", "v2", "--progressive", "--dwell", "60"]) == 0
    assert borgctl([*models, "pause", "regime"]) == 0
    assert borgctl([*models, "pause", "regime"]) == 2
    assert borgctl([*models, "resume", "regime"]) == 0
    capsys.readouterr()
    assert borgctl([*models, "status"]) == 0
    out = capsys.readouterr().out
    assert "rollout of v2 (baseline v1): running, step 1/3 (10% of nodes)" in out and "dwell left" in out
    assert borgctl([*models, "rollback", "regime"]) == 0
    assert rollout.read_state(root).status == "rolled_back" and rollout.current_version(root) == "v1"  # type: ignore[union-attr]
    assert borgctl([*models, "promote", "regime", "v2", "--progressive"]) == 0
    assert borgctl([*models, "promote", "regime", "v2"]) == 0, "a plain promote finishes it now"
    assert rollout.read_state(root).status == "promoted" and rollout.current_version(root) == "v2"  # type: ignore[union-attr]
    assert borgctl([*models, "promote", "regime", "v2", "--progressive"]) == 2, "already served"
    assert [e["status"] for e in rollout.read_events(root)] == [
        "shadow", "running", "paused", "running", "rolled_back", "running", "promoted"]


async def test_events_wait_for_the_broker_and_are_published_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from services.regime.settings import RegimeSettings
    from services.runtime import rollout_watch

    sent: list[tuple[str, str]] = []
    broker_up = False

    class FakeSink:  # the runtime's Sink as far as the watcher uses it
        def __init__(self, **kw: Any) -> None:
            assert kw["service"] == "regime-rollout" and kw["topic_prefix"] == settings.topic_prefix

        async def start(self) -> None:
            if not broker_up:
                raise ConnectionError("no broker")

        async def send(self, topic: str, key: str, value: Any, ctx: Any) -> None:
            sent.append((topic, key))

        async def flush(self) -> None: ...

        async def stop(self) -> None: ...

    monkeypatch.setattr(rollout_watch, "Sink", FakeSink)
    root = root_with(tmp_path, "v1", "v2")
    settings = RegimeSettings(rollout_min_samples=10)
    w = RolloutWatcher("regime", root, lambda p: p.name, Stats(), settings, serving=lambda: "v1")
    start(root, "v2", progressive=True, dwell_s=1.0)
    w.check()
    await w.publish()
    assert sent == [] and len(w.events) == 1, "kept while the broker is away"
    broker_up = True
    await w.publish()
    await w.publish()
    assert sent == [("rollouts.v1", "regime")] and w.events == []
    # run(): checks on its own loop, a publisher task beside it; an operator's pause reaches the topic
    import asyncio

    w.settings = RegimeSettings(rollout_min_samples=10, rollout_poll_s=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    assert borgctl(["model", "--models", str(tmp_path), "pause", "regime"]) == 0
    for _ in range(100):
        if len(sent) == 2:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert sent == [("rollouts.v1", "regime")] * 2 and w.events == []
