"""The arena-knowledge research tool (loadtests/arena_knowledge.py) on synthetic arrivals: its belief
oracle with true beliefs is the arena's oracle exactly, so the other beliefs measure knowledge alone; the
loop's pod factory is restored afterwards; the CLI writes one row per variant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests import arena_knowledge as knowledge
from simulator.arena import loop as arena_loop
from simulator.arena.arrivals import Arrival, synthetic_tasks, to_arrivals
from simulator.workloads import holdout_split


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
