"""The arena-knowledge research tool (loadtests/arena_knowledge.py) on synthetic arrivals: its belief
oracle with true beliefs is the arena's oracle exactly, so the other beliefs measure knowledge alone; the
loop's pod factory is restored afterwards; the CLI writes one row per variant; the move variants (a corrective
step after start) evict through the arena's own mechanism and account every move, and with no budget they are
their placement belief exactly."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import pytest

from loadtests import arena_knowledge as knowledge
from simulator.arena import loop as arena_loop
from simulator.arena.arrivals import Arrival, synthetic_tasks, to_arrivals
from simulator.arena.aware import ArenaView
from simulator.workloads import KINDS, KINDS_BY_CLASS, holdout_split


def _arrivals() -> tuple[list[Arrival], list[str]]:
    train, held = holdout_split(seed=0)
    arrivals, _ = to_arrivals(synthetic_tasks(60, seed=5, span_s=1800.0), kinds=held, nodes=6, seed=5,
                              horizon_s=1800.0, node_fraction=0.125, target_load=0.6)
    return list(arrivals), list(train)


def test_true_beliefs_reproduce_the_oracle_and_the_loop_is_restored() -> None:
    arrivals, train = _arrivals()
    assert len(arrivals) > 20
    original = arena_loop.pod_of
    rows = knowledge.run_variants(arrivals, 6, 1800.0, 5, ["kube-default", "oracle", "oracle-belief", "a-class"],
                                  train, progress=False)
    assert arena_loop.pod_of is original
    assert rows["oracle-belief"]["slo_violation_task_s"] == rows["oracle"]["slo_violation_task_s"]
    assert rows["oracle-belief"]["useful_cpu_utilisation"] == rows["oracle"]["useful_cpu_utilisation"]
    assert rows["oracle"]["x_oracle"] == 1.0 and rows["kube-default"]["x_kube_default"] == 1.0
    # class-level beliefs are a different policy: they do not reproduce the oracle's placements
    assert rows["a-class"]["arriving_fallback_decisions"] == 0  # a-class never looks for a job profile
    assert isinstance(rows["a-class"]["slo_violation_task_s"], float)


def test_cli_refuses_unknown_variants_and_writes_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert knowledge.main(["--synthetic", "30", "--quick", "--variants", "a-class,nope", "--out", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err
    assert knowledge.main(["--synthetic", "30", "--quick", "--seed", "2", "--variants", "oracle,b-res-exact",
                           "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "seed2-quick-syn30.json").read_text())
    assert set(doc["rows"]) == {"oracle", "b-res-exact"}
    assert doc["rows"]["b-res-exact"]["placements"] > 0


def test_move_variant_moves_and_accounts_and_without_budget_is_its_belief(monkeypatch: pytest.MonkeyPatch) -> None:
    arrivals, train = _arrivals()
    monkeypatch.setitem(knowledge.MOVE_VARIANTS, "b-res-exact+none", ("b-res-exact", knowledge.MoveBudget(0, 60.0)))
    # a loose budget so the small synthetic run moves: 1 per node per tick, at most 30 a minute
    monkeypatch.setitem(knowledge.MOVE_VARIANTS, "b-res-exact+free",
                        ("b-res-exact", knowledge.MoveBudget(30, 60.0, pdb=False)))
    rows = knowledge.run_variants(arrivals, 6, 1800.0, 5, ["b-res-exact", "b-res-exact+none", "b-res-exact+free"],
                                  train, progress=False)
    base, none, moved = rows["b-res-exact"], rows["b-res-exact+none"], rows["b-res-exact+free"]
    for key in ("slo_violation_task_s", "useful_cpu_utilisation", "placements", "mean_wait_s"):
        assert none[key] == base[key], key  # the controller is inert without budget: placements unchanged
    def num(row: dict[str, object], key: str) -> float:
        value = row[key]
        assert isinstance(value, float), key
        return value

    assert num(none, "moves") == 0 and num(none, "hot_node_ticks") > 0
    assert num(moved, "moves") >= 1
    assert num(moved, "evictions") == num(moved, "moves")  # every move is one Arena.evict
    # each move re-places its task once: every placement is a first start or a restart
    assert num(moved, "placements") == num(moved, "finished") + num(moved, "unfinished") + num(moved, "moves")
    assert num(moved, "lost_work_task_s") > 0.0  # a task is moved after it ran at least one tick
    assert num(moved, "useful_cpu_utilisation_net") == pytest.approx(
        num(moved, "useful_cpu_utilisation") - num(moved, "lost_cpu_utilisation"))


def _arrival(task_id: int, job_id: int, kind: str, ls: bool) -> Arrival:
    return Arrival(task_id, job_id, 0.0, 600.0, 0.1, 0.05, ls, kind, KINDS[kind].workload_class, 1.0)


def test_move_takes_the_batch_aggressor_off_the_victims_node_and_accounts_its_lost_work() -> None:
    victim = _arrival(1, 1, KINDS_BY_CLASS["frontend_bound"][0], True)
    batch_kinds = [k for c in ("cpu_bound", "memory_bound") for k in KINDS_BY_CLASS[c]]
    for kind in batch_kinds:  # the first batch kind that pushes the frontend task over the SLO
        view = ArenaView(2)
        policy = knowledge.BeliefOracle("b-res-exact+move", 1, view, "true", "class", knowledge.MEAN_INTENSITY,
                                        knowledge.class_means(list(KINDS)))
        mover = knowledge.MoveController(policy, knowledge.MoveBudget(5, 300.0, pdb=False))
        arena = arena_loop.Arena([], 2, policy, view, horizon_s=600.0, tick_s=10.0, controller=mover)
        policy.arena = arena
        aggressor = _arrival(2, 2, kind, False)
        for a in (victim, aggressor):  # both bound to node 0, as a bad placement would do
            pod = knowledge.pod_of(a)
            arena.resources[0] = arena.resources[0].add(pod)
            arena.residents[0].append(arena_loop._Running(a, pod, 0, 0.0, a.work_s))
        arena._refresh(0)
        if view.slowdown[0][0] > 1.25:
            break
    else:
        pytest.fail("no batch kind pushes the frontend task over the SLO")
    aggressor_slowdown = arena.residents[0][1].slowdown
    arena._advance(0.0, [])  # one tick: both ran 10 s at their slowdowns
    pending: deque[Arrival] = deque()
    mover.step(1, 10.0, arena, pending)
    assert list(pending) == [aggressor] and mover.moves == 1 and arena.evictions == 1
    assert [t.arrival for t in arena.residents[0]] == [victim] and view.slowdown[0][0] == 1.0
    assert mover.lost_work_s == pytest.approx(10.0 / aggressor_slowdown)  # the work it did is redone
    assert mover.moved_latency_sensitive == 0
    assert policy.choose(knowledge.pod_of(aggressor), arena.resources) == 1  # never back onto node 0
    mover.step(2, 20.0, arena, pending)  # the victim is fine now: nothing more to move
    assert mover.moves == 1
