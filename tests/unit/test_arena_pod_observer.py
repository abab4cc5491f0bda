"""The arena's pod-relative label source (``simulator.arena.pod_observer``) and ``--regime-basis pods``."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from contracts.models import REGIMES, UNKNOWN_REGIME, WORKLOAD_CLASSES
from featurelib.pod import pod_uid_of
from services.regime.pod_model import load_pod_regime_model
from simulator.arena.cli import eval_arena
from simulator.arena.pod_observer import PodRegimeObserver, regime_interference_table
from simulator.arena.world import ArenaCluster, arena_pod_uid, job_of_arena_uid
from simulator.workloads import KINDS, class_slowdowns, regime_of

ROOT = Path(__file__).resolve().parents[2]
MODEL_ROOT = ROOT / "models" / "regime_pods"


@pytest.fixture(scope="module")
def shipped() -> Path:
    return MODEL_ROOT / (MODEL_ROOT / "CURRENT").read_text().strip()


def test_an_arena_pod_uid_is_a_kubelet_uid_that_names_its_job() -> None:
    uid = arena_pod_uid(7, 6_251_812_952)  # a 2011 job id: above 2**32
    assert pod_uid_of(f"kubepods/burstable/pod{uid}") == uid
    assert job_of_arena_uid(uid) == f"arena/{6_251_812_952:012x}"
    assert job_of_arena_uid(arena_pod_uid(8, 6_251_812_952)) == job_of_arena_uid(uid)
    assert job_of_arena_uid(arena_pod_uid(7, 1)) != job_of_arena_uid(uid)
    with pytest.raises(ValueError, match=">= 0"):
        arena_pod_uid(-1, 3)


def test_the_interference_table_is_each_regimes_mean_class_slowdown() -> None:
    kinds = ["stream_triad", "crypto", "kv_cache"]
    table = regime_interference_table(kinds, seed=3, samples=2000)
    assert set(table) == set(REGIMES)
    assert all(len(row) == len(WORKLOAD_CLASSES) and min(row) >= 1.0 for row in table.values())
    assert table == regime_interference_table(kinds, seed=3, samples=2000)  # seeded
    # one kind alone (stream_triad: membw 0.9 x intensity 0.5-1 crosses the 0.5 threshold above intensity 0.56):
    # only "none" and "membw" occur, each mean within what one to four such co-runners cause
    lone = KINDS["stream_triad"].pressure
    row = regime_interference_table(["stream_triad"], seed=1, samples=500)
    membw = np.asarray(row["membw"])
    assert regime_of(np.array([lone])) == "membw"
    assert np.all(membw >= class_slowdowns(np.array([lone]) * 0.55) - 1e-9)
    assert np.all(membw <= class_slowdowns(np.array([lone] * 4)) + 1e-9)
    assert row["membw"][WORKLOAD_CLASSES.index("memory_bound")] > row["none"][WORKLOAD_CLASSES.index("memory_bound")]
    # regimes no sample produced take the worst mean of those seen
    worst = tuple(np.maximum(membw, np.asarray(row["none"])).tolist())
    assert row["llc"] == row["core"] == row["mixed"] == pytest.approx(worst)
    with pytest.raises(ValueError, match="kinds"):
        regime_interference_table([], seed=1)


def _cluster_with_jobs(heldout: list[str]) -> ArenaCluster:
    cluster = ArenaCluster(3, seed=4, interval_ms=10_000)
    # nodes 0 and 1 share two jobs (three pods each over the fleet: a reference); node 2 runs nothing
    a, b = heldout[0], heldout[1]
    cluster.set_corunners(0, [a, a, b], [0.9, 0.8, 0.7],
                          [arena_pod_uid(0, 11), arena_pod_uid(1, 11), arena_pod_uid(2, 12)])
    cluster.set_corunners(1, [a, b, b], [0.6, 0.9, 1.0],
                          [arena_pod_uid(3, 11), arena_pod_uid(4, 12), arena_pod_uid(5, 12)])
    return cluster


def test_the_observer_labels_nodes_from_their_pods_and_abstains_on_a_node_without_pods(shipped: Path) -> None:
    # floors at 0: every window with a pod read is answered, so the answered path is exercised whatever the
    # shipped floors say about these few windows
    model = dataclasses.replace(load_pod_regime_model(shipped), confidence_floors=(0.0,) * len(REGIMES))
    heldout = list(model.card["data"]["heldout_kinds"])
    table = regime_interference_table(list(model.card["data"]["train_kinds"]), seed=1, samples=500)
    cluster = _cluster_with_jobs(heldout)
    observer = PodRegimeObserver(model, cluster, table)
    assert observer.labels == [None, None, None]
    for _ in range(6):
        observer.observe(cluster.tick())
    assert observer.windows > 0 and observer.cpu_s > 0
    empty = observer.labels[2]
    assert empty is not None and empty.regime == UNKNOWN_REGIME and "counters_missing" in empty.abstain
    assert observer.abstain_reasons["counters_missing"] >= 1
    answered = [label for label in observer.labels[:2] if label is not None and label.regime != UNKNOWN_REGIME]
    assert len(answered) == 2
    for label in answered:
        assert dict(label.interference) == dict(zip(WORKLOAD_CLASSES, table[label.regime], strict=True))
        assert 0.0 < label.confidence <= 1.0
    coverage, accuracy = observer.coverage(), observer.selective_accuracy()
    assert coverage is not None and 0.0 < coverage < 1.0  # node 2 never answers
    assert observer.correct <= observer.windows - observer.abstained
    assert accuracy is not None and 0.0 <= accuracy <= 1.0
    mae = observer.interference_mae()
    assert mae is not None and mae > 0.0  # a table of means is never exactly a node's slowdowns

    bare = PodRegimeObserver(model, _cluster_with_jobs(heldout), None)  # the stage's record: no interference
    for _ in range(6):
        bare.observe(bare.cluster.tick())
    assert all(label is None or label.interference == () for label in bare.labels)
    assert bare.interference_mae() is None


def test_regime_basis_pods_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "a"
    assert eval_arena(["--policies", "kube-default,extender", "--synthetic", "40", "--nodes", "5", "--horizon-s",
                       "400", "--seed", "2", "-q", "--regime-basis", "pods", "--out", str(out)]) == 0
    doc = orjson.loads((out / "results.json").read_bytes())
    details = doc["details"]
    assert details["regime_basis"] == "pods" and details["pod_interference"] == "table"
    assert details["pod_regime_model_version"] == (MODEL_ROOT / "CURRENT").read_text().strip()
    assert set(details["pod_interference_table"]) == set(REGIMES)
    by = {(r["case"], r["metric"]): r["value"] for r in doc["results"]}
    assert 0.0 <= by[("extender", "model_coverage")] <= 1.0
    assert by[("extender", "placements")] > 20
    assert ("kube-default", "model_coverage") not in by  # the passive policies read no labels
    node = tmp_path / "n"
    assert eval_arena(["--policies", "extender", "--synthetic", "40", "--nodes", "5", "--horizon-s", "400",
                       "--seed", "2", "-q", "--out", str(node)]) == 0
    node_doc = orjson.loads((node / "results.json").read_bytes())
    assert node_doc["details"]["regime_basis"] == "node" and node_doc["details"]["pod_interference_table"] is None


def test_regime_basis_pods_refuses_a_missing_model_or_other_heldout_kinds(
        tmp_path: Path, shipped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert eval_arena(["--synthetic", "10", "--regime-basis", "pods", "--pod-regime-model", str(missing), "-q",
                       "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("eval arena: --pod-regime-model") and str(missing) in err and "\n" not in err
    other = tmp_path / "v"
    shutil.copytree(shipped, other)
    card = orjson.loads((other / "model_card.json").read_bytes())
    card["data"]["heldout_kinds"] = ["crypto"]
    (other / "model_card.json").write_bytes(orjson.dumps(card))
    assert eval_arena(["--synthetic", "10", "--regime-basis", "pods", "--pod-regime-model", str(other), "-q",
                       "--out", str(tmp_path / "p")]) == 2
    assert "holds out ['crypto']" in capsys.readouterr().err
