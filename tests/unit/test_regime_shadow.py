"""Regime shadow scoring: truth side channel, agreement and online metrics, the split of a batch between models."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import orjson

from contracts.models import REGIMES
from services.regime.model import load_regime_model
from services.regime.shadow import RegimeShadow, RegimeShadowStats, answers
from services.regime.truth import TruthTail
from services.runtime.rollout import RolloutState, node_bucket
from services.runtime.rollout_watch import Live
from services.runtime.vector_batch import ScoredBatch
from training.regime.simwindows import simulate_windows

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "regime" / "20261126-232416-sim"


def test_truth_tail_labels_a_window_by_the_majority_of_its_pane_and_waits_for_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "truth.jsonl"
    lines = [{"node": "n1", "ts_ms": t, "regime": r} for t, r in
             ((10_000, "llc"), (12_000, "core"), (15_000, "llc"), (19_999, "llc"), (20_000, "none"))]
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines) + b'{"node": "n1", "ts_')
    tail = TruthTail(path)
    assert tail.poll() == 5
    assert tail.label("n1", 20_000) == "llc", "ticks in [end - 10 s, end)"
    assert tail.label("n1", 30_000) == "none"
    assert tail.label("n1", 50_000) is None and tail.label("n2", 20_000) is None
    with path.open("ab") as out:
        out.write(b'ms": 40000, "regime": "membw"}\nnot json\n')
    assert tail.poll() == 1, "the line cut in half is read once whole; garbage is skipped"
    assert tail.label("n1", 45_000) == "membw"
    path.write_bytes(orjson.dumps({"node": "n9", "ts_ms": 1, "regime": "core"}) + b"\n")  # a new, shorter file
    assert tail.poll() == 1 and tail.label("n9", 5) == "core" and tail.label("n1", 45_000) is None


def test_stats_count_agreement_and_compare_at_matched_coverage_by_name() -> None:
    stats = RegimeShadowStats()
    cur = np.array(["llc", "core", "unknown", "none"], dtype=object)
    cand = np.array(["llc", "membw", "unknown", "unknown"], dtype=object)
    stats.observe(cur, cand, ["llc", "core", "none", None], np.array([0.9, 0.8, 0.3, 0.7]),
                  np.array([0.6, 0.95, 0.2, 0.1]))
    assert stats.agreement() == 0.5 and stats.labelled == 3
    done, acc, correct, cov = stats.comparisons()
    assert (done.current, done.candidate, done.samples, done.labelled) == (1.0, 1.0, 4, False)
    # both answered 2 labelled windows: the whole of each; the candidate's membw on a core window is wrong
    assert (acc.name, acc.current, acc.candidate, acc.samples) == ("matched_accuracy", 1.0, 0.5, 2)
    assert (correct.current, correct.candidate, correct.samples) == (2 / 3, 1 / 3, 3)
    assert (cov.current, cov.candidate, cov.samples) == (2 / 3, 2 / 3, 3)
    # a broader current model is cut to its most confident answers: core (0.8) drops, llc (0.9) stays
    stats.observe(np.array(["core"], dtype=object), np.array(["unknown"], dtype=object), ["membw"],
                  np.array([0.99]), np.array([0.1]))
    acc = stats.comparisons()[1]
    assert (acc.current, acc.candidate, acc.samples) == (0.5, 0.5, 2), "0.99 (wrong) and 0.9 (right) of the current"
    summary = stats.summary()
    assert summary["accuracy_current"] == 2 / 3 and summary["matched_accuracy_samples"] == 2
    stats.reset()
    assert stats.agreement() is None and stats.comparisons() == [] and stats.labelled == 0


def batch(model_dir: Path, n_nodes: int = 30) -> tuple[ScoredBatch, list[str]]:  # type: ignore[type-arg]
    w = simulate_windows(kinds=None, nodes=n_nodes, ticks=40, seed=3)
    model = load_regime_model(model_dir)
    probs, slowdown = model(w.x)
    rows = [type("Row", (), {"node": str(n), "ts_ms": int(t)})() for n, t in zip(w.node, w.ts_ms, strict=True)]
    events = list(range(len(rows)))
    return ScoredBatch(model, events, rows, (probs, slowdown), 0, w.x), [REGIMES[r] for r in w.regime]  # type: ignore[arg-type]


def test_split_serves_the_candidate_on_its_nodes_only_and_compares_on_all(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(SHIPPED, bad)
    card = orjson.loads((bad / "model_card.json").read_bytes())
    card["outputs"]["regimes"] = list(reversed(card["outputs"]["regimes"]))
    (bad / "model_card.json").write_bytes(orjson.dumps(card))
    scored, _ = batch(SHIPPED)
    candidate = load_regime_model(bad)
    stats = RegimeShadowStats()
    shadow = RegimeShadow(stats, None)
    shadow_only = RolloutState(kind="regime", candidate="bad", baseline="cur", status="shadow")
    assert shadow.split(scored, Live(candidate, shadow_only, [])) == [scored], "shadow: published as before"
    assert stats.compared == len(scored.rows) and stats.labelled == 0
    # same probabilities, names reversed: agree only where both abstain or the argmax is the middle class
    x = scored.inputs
    assert x is not None
    cur, cand = answers(scored.model, x, scored.outputs[0]), answers(candidate, x, scored.outputs[0])
    assert stats.agreement() == np.mean(cur == cand) < 1.0
    step = RolloutState(kind="regime", candidate="bad", baseline="cur", status="running", step=1)
    parts = shadow.split(scored, Live(candidate, step, []))
    assert [p.model for p in parts] == [scored.model, candidate]
    assert all(node_bucket(r.node) >= 0.5 for r in parts[0].rows)
    assert all(node_bucket(r.node) < 0.5 for r in parts[1].rows)
    assert sum(len(p.rows) for p in parts) == len(scored.rows)
    served = parts[1]
    idx = [scored.rows.index(r) for r in served.rows]
    np.testing.assert_array_equal(served.outputs[0], scored.outputs[0][idx])
    np.testing.assert_array_equal(served.inputs, scored.inputs[idx])  # type: ignore[index]


def test_a_failing_candidate_never_costs_the_current_answers() -> None:
    scored, _ = batch(SHIPPED, n_nodes=4)

    def broken(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise RuntimeError("onnx says no")

    stats = RegimeShadowStats()
    live = Live(broken, RolloutState(kind="regime", candidate="x", baseline=None, status="running", step=2), [])
    assert RegimeShadow(stats, None).split(scored, live) == [scored]  # type: ignore[arg-type]
    assert stats.failed == len(scored.rows) and stats.compared == 0
    (done,) = stats.comparisons()
    assert done.candidate == 0.0 and done.worse_by() > 0.01, "rolled back once judged"
