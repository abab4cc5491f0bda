"""featurelib.pod_regime (a node's pods read against their own jobs), the shipped pod-relative regime model and its
rules, and ``borgctl eval regime --basis pods`` on data the project simulates itself (held-out kinds)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from contracts.models import REGIMES
from featurelib.node.windows import pane_phase_ms
from featurelib.pod_regime import (
    COLUMNS,
    LAG_MAX_MS,
    N_COLUMNS,
    RATIOS,
    SPAN_WINDOWS_MAX,
    VICTIM_COLUMNS,
    JobReference,
    PodRegimeWindow,
    PodRegimeWindows,
    deviations,
    pod_regime_schema_hash,
    pod_row,
    victim_columns,
)
from services.regime import abstention
from services.regime.pod_model import load_pod_regime_model
from services.regime.pods.jobs import PodJobs
from services.regime.pods.processor import PodRegimeProcessor, label_of
from services.regime.pods.settings import PodRegimeSettings
from services.runtime.model_watch import ModelRefusedError
from simulator.cluster import SyntheticCluster
from simulator.workloads import KINDS
from training.regime.evaluate import eval_regime
from training.regime.job_relative import PodCluster
from training.regime.pod_model import (
    POD_NOISE,
    POD_NOISE_LEVELS,
    POD_SPAN_WINDOWS,
    CalibrationFold,
    leave_one_fold_out,
    median_noise,
    noise_of_draw,
    parse_noise_levels,
    per_tick_noise,
    simulate,
)
from training.regime.pod_model import main as pod_model_main

ROOT = Path(__file__).resolve().parents[2]
MODEL_ROOT = ROOT / "models" / "regime_pods"
COL = {name: i for i, name in enumerate(COLUMNS)}
FOUR = ["search_index", "spmv", "video_encode", "web_frontend"]  # one kind per class: every regime can occur


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-000000000000"


def pod_counts(ipc: float = 2.0, miss_ratio: float = 0.1, miss_pki: float = 5.0, branch_miss_ratio: float = 0.02,
               cycles: float = 1e9) -> dict[str, float]:
    instructions = ipc * cycles
    misses = miss_pki * instructions / 1000
    branches = 0.2 * instructions
    return {"cycles": cycles, "instructions": instructions, "cache-misses": misses, "task-clock": 1e9,
            "context-switches": 10.0, "cache-references": misses / miss_ratio, "branch-instructions": branches,
            "branch-misses": branch_miss_ratio * branches}


def cgroup(n: int, counts: dict[str, float], drop: str | None = None) -> tuple[str, dict[str, dict[str, object]]]:
    return (f"/kubepods/burstable/pod{uid(n)}",
            {e: {"raw": v, "value": v, "enabled_ns": 10**9, "running_ns": 10**9, "status": "counted"}
             for e, v in counts.items() if e != drop})


def node_states(nodes: int, ticks: int) -> Iterator[list[dict[str, object]]]:
    """Realistic node-side NodeStates (the simulator's, 1 s apart), one list per tick."""
    for batch in SyntheticCluster(nodes=nodes, seed=3).run(ticks):
        yield batch.nodestate_dicts()


def test_reference_needs_three_distinct_pods_and_forgets_windows_older_than_its_history() -> None:
    ref = JobReference(history_ms=60_000, min_pods=3)
    lone = pod_row(pod_counts(ipc=2.0), 10.0)
    for t in range(3):
        ref.add(t * 10_000, "web", "a", lone)
    assert ref.reference("web", 20_000) is None  # one replica's own past is no reference
    ref.add(20_000, "web", "b", pod_row(pod_counts(ipc=1.0, miss_ratio=0.3), 10.0))
    ref.add(20_000, "web", "c", pod_row(pod_counts(ipc=1.5, miss_ratio=0.2), 10.0))
    got = ref.reference("web", 20_000)
    assert got is not None
    ipcs = [2.0, 2.0, 2.0, 1.0, 1.5]
    assert got[0] == pytest.approx(np.quantile(ipcs, 0.9))
    assert got[1] == pytest.approx(np.quantile([0.1, 0.1, 0.1, 0.3, 0.2], 0.1))
    assert ref.reference("other", 20_000) is None
    assert ref.reference("web", 79_999) is not None  # b and c (t=20 s) are still inside 60 s
    assert ref.reference("web", 80_000) is None  # everything aged out


def test_reference_is_bounded_in_jobs() -> None:
    ref = JobReference(min_pods=1, max_jobs=2)
    row = pod_row(pod_counts(), 10.0)
    for job in ("a", "b", "c"):
        ref.add(0, job, job, row)
    assert ref.reference("a", 0) is None and ref.reference("c", 0) is not None


def test_deviations_and_victim_columns_by_hand() -> None:
    rows = np.array([pod_row(pod_counts(ipc=1.0, miss_ratio=0.2, miss_pki=10.0, branch_miss_ratio=0.02), 10.0),
                     pod_row(pod_counts(ipc=2.0, miss_ratio=0.1, miss_pki=5.0, branch_miss_ratio=0.04), 10.0),
                     pod_row(pod_counts(), 10.0)])
    reference = np.array([2.0, 0.1, 5.0, 0.02])
    dev = deviations(rows, [reference, reference, None])
    assert [name for name, _, _ in RATIOS] == ["ipc", "miss_ratio", "miss_pki", "branch_miss_ratio"]
    np.testing.assert_allclose(dev[0], [math.log(2), math.log(2), math.log(2), 0.0], atol=1e-9)
    np.testing.assert_allclose(dev[1], [0.0, 0.0, 0.0, math.log(2)], atol=1e-9)
    assert np.isnan(dev[2]).all()  # no reference, no deviation
    v = dict(zip(VICTIM_COLUMNS, victim_columns(rows, dev), strict=True))
    assert v["pods"] == 3 and v["pods_referenced"] == 2
    assert v["max_dev_ipc"] == pytest.approx(math.log(2))
    assert v["max_dev_branch_miss_ratio"] == pytest.approx(math.log(2))
    assert v["sum_rise_miss_ratio"] == pytest.approx(math.log(2))
    assert v["victim_miss_ratio"] == pytest.approx(0.2)  # the pod whose miss ratio rose most: the first
    assert v["victim_ref_pki"] == pytest.approx(10.0 / 0.2)
    assert v["victim_ipc"] == pytest.approx(2.0)  # the pod whose branch misses rose most: the second
    empty = dict(zip(VICTIM_COLUMNS, victim_columns(rows[:0], dev[:0]), strict=True))
    assert empty["pods"] == 0 and math.isnan(empty["max_dev_ipc"]) and empty["sum_rise_ipc"] == 0.0


def test_a_pod_disturbed_on_its_node_rises_against_its_job_on_other_nodes() -> None:
    jobs = {uid(n): "shop/web" for n in range(4)} | {uid(9): "shop/db"}
    frames = PodRegimeWindows(jobs.get)
    last: dict[str, np.ndarray] = {}
    for states in node_states(nodes=4, ticks=60):
        for i, state in enumerate(states):
            counts = pod_counts(ipc=1.0, miss_ratio=0.2) if i == 3 else pod_counts()
            pods = dict([cgroup(i, counts), ("/system.slice/sshd.service", {})])
            if i == 0:
                pods.update([cgroup(9, pod_counts(ipc=0.5))])  # its job has one pod: no reference
            state["cgroups"] = pods
            for w in frames.observe(state):
                assert w.x.shape == (N_COLUMNS,) and w.x.dtype == np.float32
                last[w.node] = w.x
    calm, disturbed = last["sim-0000"], last["sim-0003"]
    assert calm[COL["pods"]] == 2 and calm[COL["pods_referenced"]] == 1
    assert disturbed[COL["max_dev_ipc"]] == pytest.approx(math.log(2), abs=1e-4)
    assert disturbed[COL["max_dev_miss_ratio"]] == pytest.approx(math.log(2), abs=1e-4)
    assert calm[COL["max_dev_ipc"]] == pytest.approx(0.0, abs=1e-4)
    assert not np.isnan(calm[len(VICTIM_COLUMNS):2 * len(VICTIM_COLUMNS)]).all()  # the node's own features


def test_pods_missing_an_event_or_gone_before_the_pane_ends_are_not_read() -> None:
    frames = PodRegimeWindows({uid(n): "j" for n in range(3)}.get)
    seen: list[float] = []
    for tick, states in enumerate(node_states(nodes=1, ticks=40)):
        state = states[0]
        ts = int(state["ts_ms"])  # type: ignore[call-overload]
        in_pane = (ts - pane_phase_ms("sim-0000")) % 10_000
        pods = dict([cgroup(0, pod_counts())])
        pods.update([cgroup(1, pod_counts(), drop="branch-misses" if tick == 17 else None)])
        if in_pane < 5_000:
            pods.update([cgroup(2, pod_counts())])  # leaves half-way through every pane
        state["cgroups"] = pods
        seen += [float(w.x[COL["pods"]]) for w in frames.observe(state)]
    assert len(seen) >= 3
    # pod 2 is never read; pod 1 is not read in the pane where it missed an event
    assert 1.0 in seen and 2.0 in seen and set(seen) <= {1.0, 2.0}


def test_previous_window_columns_and_their_absence_after_a_gap() -> None:
    frames = PodRegimeWindows({uid(0): "j"}.get)
    out = []
    for tick, states in enumerate(node_states(nodes=1, ticks=80)):
        if 30 <= tick < 30 + LAG_MAX_MS // 1000 + 15:
            continue  # the node goes quiet for longer than LAG_MAX_MS
        states[0]["cgroups"] = dict([cgroup(0, pod_counts())])
        out += frames.observe(states[0])
    half = N_COLUMNS // 2
    firsts = [w for w in out if np.isnan(w.x[half:]).all()]
    assert out[0] in firsts and len(firsts) == 2  # the very first window, and the first after the gap
    chained = [(a, b) for a, b in itertools.pairwise(out) if b.ts_ms - a.ts_ms <= LAG_MAX_MS]
    assert chained
    for a, b in chained:
        np.testing.assert_array_equal(b.x[half:], a.x[:half])


def _ipc_dev_by_pane(span_windows: int, slowed_pane: int, skipped_pane: int | None = None) -> dict[int, float]:
    """Node 3's pod (one of a job's four, one per node) runs at half its job's IPC in one pane only; its IPC
    deviation per closed pane. ``skipped_pane``: a pane in which it lacks an event (not read)."""
    jobs = {uid(n): "shop/web" for n in range(4)}
    frames = PodRegimeWindows(jobs.get, span_windows=span_windows)
    got: dict[int, float] = {}
    for states in node_states(nodes=4, ticks=150):
        for i, state in enumerate(states):
            pane = (int(state["ts_ms"]) - pane_phase_ms(str(state["node"]))) // 10_000  # type: ignore[call-overload]
            slowed = i == 3 and pane == slowed_pane
            drop = "branch-misses" if i == 3 and pane == skipped_pane else None
            state["cgroups"] = dict([cgroup(i, pod_counts(ipc=1.0 if slowed else 2.0), drop=drop)])
            for w in frames.observe(state):
                if w.node == "sim-0003" and w.pods:
                    got[w.pane] = float(w.x[COL["max_dev_ipc"]])
    return got


def test_a_span_reads_each_pod_over_its_last_windows_by_hand() -> None:
    panes = sorted(_ipc_dev_by_pane(1, slowed_pane=-1))
    slowed = panes[6]
    one = _ipc_dev_by_pane(1, slowed)
    assert one[slowed] == pytest.approx(math.log(2), abs=1e-4)  # one window: the whole slowdown, then none
    assert one[slowed + 1] == pytest.approx(0.0, abs=1e-4)
    three = _ipc_dev_by_pane(3, slowed)
    # three equal windows summed: (2 + 2 + 1) instructions per (1 + 1 + 1) cycles -> IPC 5/3 against the job's 2
    for pane in (slowed, slowed + 1, slowed + 2):
        assert three[pane] == pytest.approx(math.log(2 / (5 / 3)), abs=1e-4)
    assert three[slowed - 1] == pytest.approx(0.0, abs=1e-4)
    assert three[slowed + 3] == pytest.approx(0.0, abs=1e-4)  # the slow window has left the span
    # not read in a window (an event missing): its span starts again after it
    gap = _ipc_dev_by_pane(3, slowed, skipped_pane=slowed + 1)
    assert slowed + 1 not in gap
    assert gap[slowed + 2] == pytest.approx(0.0, abs=1e-4)


def test_the_span_is_part_of_the_rows_meaning() -> None:
    assert pod_regime_schema_hash() == pod_regime_schema_hash(1) != pod_regime_schema_hash(3)
    for bad in (0, SPAN_WINDOWS_MAX + 1):
        with pytest.raises(ValueError, match="span_windows"):
            PodRegimeWindows(lambda _: None, span_windows=bad)
        with pytest.raises(ValueError, match="span_windows"):
            pod_regime_schema_hash(bad)


def test_bounded_in_pods_per_pane() -> None:
    frames = PodRegimeWindows(lambda _: None, max_pods=2)
    for states in node_states(nodes=1, ticks=25):
        states[0]["cgroups"] = dict(cgroup(n, pod_counts()) for n in range(5))
        for w in frames.observe(states[0]):
            assert w.pods == 2 and w.referenced == 0
    assert frames.dropped_pods > 0


@pytest.fixture(scope="module")
def shipped() -> Path:
    return MODEL_ROOT / (MODEL_ROOT / "CURRENT").read_text().strip()


def test_shipped_model_abstains_without_pods_or_counters_and_below_its_floor(shipped: Path) -> None:
    model = load_pod_regime_model(shipped)
    floors = model.confidence_floors
    assert len(floors) == len(REGIMES) and all(0.0 < f <= 1.0 for f in floors)
    assert sum(f < 1.0 for f in floors) >= 4  # every regime but at most one can be answered
    x = np.full((3, N_COLUMNS), np.nan, dtype=np.float32)
    probs, _ = model(x)
    assert probs.shape == (3, 5)
    mask, ood = model.judge(x, probs)
    assert (mask & abstention.COUNTERS_MISSING).all() and np.isnan(ood).all()
    row = np.zeros((1, N_COLUMNS), dtype=np.float32)
    row[:, COL["pods"]] = 2
    for k, floor in enumerate(floors):
        if floor >= 1.0:
            continue
        at, below = np.full((1, 5), (1 - floor) / 4), np.full((1, 5), (1 - floor + 0.02) / 4)
        at[0, k], below[0, k] = floor, floor - 0.02  # each regime is judged against its own floor
        assert model.judge(row, at)[0].tolist() == [0], REGIMES[k]
        if int(below.argmax()) == k:  # still naming the same regime, just below its floor
            assert model.judge(row, below)[0].tolist() == [abstention.LOW_CONFIDENCE], REGIMES[k]
    empty = row.copy()
    empty[:, COL["pods"]] = 0
    assert model.judge(empty, np.tile([[0.96, 0.01, 0.01, 0.01, 0.01]], (1, 1)))[0].tolist() == \
        [abstention.COUNTERS_MISSING]
    unsure = np.full((1, 5), 0.2)
    assert model.judge(row, unsure)[0].tolist() == [abstention.LOW_CONFIDENCE]


def test_leave_one_fold_out_judges_each_fold_with_floors_from_the_others_only() -> None:
    def fold(novel: tuple[str, ...], rows: list[tuple[float, int, int]]) -> CalibrationFold:
        probs = np.array([[c if k == top else (1 - c) / 4 for k in range(5)] for c, top, _ in rows])
        return CalibrationFold({}, novel, probs, np.array([t for _, _, t in rows]))

    # fold a: "none" answers are right only from 0.9; fold b: right from 0.6; fold c sets aside a's kinds again
    a = fold(("x",), [(0.95, 0, 0)] * 60 + [(0.7, 0, 1)] * 60)
    b = fold(("y",), [(0.95, 0, 0)] * 60 + [(0.7, 0, 0)] * 60)
    c = fold(("x",), [(0.7, 0, 1)] * 60)
    got = leave_one_fold_out([a, b, c])
    assert got is not None
    by_kinds = [(r["unseen_kinds"], r["coverage"], r["selective_accuracy"]) for r in got["folds"]]
    # a is judged by b's floor (0.7: b is right there) and fails; c is excluded from a's calibration (same kinds)
    assert by_kinds[0] == (["x"], 1.0, 0.5)
    # b by a and c pooled: 0.7 is wrong there, floor 0.95
    assert by_kinds[1] == (["y"], 0.5, 1.0)
    # c by b alone (a set aside the same kinds): b's 0.7 lets all of c's wrong answers through
    assert by_kinds[2] == (["x"], 1.0, 0.0)
    assert got["folds_meeting_goal"] == 0
    assert leave_one_fold_out([a]) is None


def test_a_card_with_one_floor_applies_it_to_every_regime(shipped: Path, tmp_path: Path) -> None:
    copy = tmp_path / "v"
    shutil.copytree(shipped, copy)
    card = orjson.loads((copy / "model_card.json").read_bytes())
    card["abstention"]["low_confidence"] = {"floor": 0.7}
    (copy / "model_card.json").write_bytes(orjson.dumps(card))
    assert load_pod_regime_model(copy).confidence_floors == (0.7,) * len(REGIMES)


def test_a_model_trained_on_other_rows_is_refused(shipped: Path, tmp_path: Path) -> None:
    copy = tmp_path / "v"
    shutil.copytree(shipped, copy)
    card = orjson.loads((copy / "model_card.json").read_bytes())
    card["features"]["schema_hash"] = "0" * 64
    (copy / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match="feature schema"):
        load_pod_regime_model(copy)
    card = orjson.loads((shipped / "model_card.json").read_bytes())
    card["abstention"]["low_confidence"]["floors"]["llc"] = 1.5
    (copy / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match=r"'llc': 1\.5"):
        load_pod_regime_model(copy)


def test_a_model_loads_with_its_span_and_a_card_naming_another_span_is_refused(shipped: Path, tmp_path: Path) -> None:
    model = load_pod_regime_model(shipped)
    assert model.span_windows == model.card["features"].get("pod_span_windows", 1)
    assert model.windows(lambda _: None).span_windows == model.span_windows
    copy = tmp_path / "v"
    shutil.copytree(shipped, copy)
    card = orjson.loads((shipped / "model_card.json").read_bytes())
    card["features"]["pod_span_windows"] = model.span_windows + 1  # rows over another span: another schema
    (copy / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match="feature schema"):
        load_pod_regime_model(copy)
    for bad in (0, SPAN_WINDOWS_MAX + 1, "3", True):
        card["features"]["pod_span_windows"] = bad
        (copy / "model_card.json").write_bytes(orjson.dumps(card))
        with pytest.raises(ModelRefusedError, match="pod_span_windows"):
            load_pod_regime_model(copy)


def test_the_stage_rebuilds_its_rows_when_a_new_model_reads_another_span(shipped: Path) -> None:
    model = load_pod_regime_model(shipped)
    served = SimpleNamespace(current=model)
    jobs = PodJobs(None, grace_s=60.0)
    proc = PodRegimeProcessor(PodRegimeSettings(max_pods_per_node=7), None, served, jobs)  # type: ignore[arg-type]
    served_model, first = proc.current_frames()
    assert served_model is model and first.span_windows == model.span_windows and first.max_pods == 7
    assert proc.current_frames()[1] is first  # same model, same rows: the open windows are kept
    other = 1 if model.span_windows != 1 else 3
    served.current = dataclasses.replace(model, span_windows=other)
    served_model, rebuilt = proc.current_frames()
    assert served_model is served.current
    assert rebuilt is not first and rebuilt.span_windows == other and rebuilt.max_pods == 7


def test_eval_regime_pods_on_held_out_kinds_holds_the_figures_in_the_docs(tmp_path: Path) -> None:
    """docs/models.md's figures, on the evaluation's own cluster (seed 7: 32 nodes x 1,500 s, pods counted with 5 %
    noise per window, each pod read over its last three windows, members trained at 3 / 5 / 8 %): the shipped floors
    (one per regime, calibrated without the held-out kinds) answer about 49 % of the windows at 0.91, and its 60 %
    most confident answers are at 0.905 — issue 20's 0.90 at coverage >= 0.60 on this seed (the fifth recipe: 0.894).
    At the first three recipes' near-noiseless pods (0.006) it still holds its accuracy."""
    out = tmp_path / "pods.json"
    assert eval_regime(["--basis", "pods", "--seed", "7", "--out", str(out), "-q"]) == 0
    doc = orjson.loads(out.read_bytes())
    got = {r["metric"]: r["value"] for r in doc["results"]}
    assert got["windows"] == 4800
    assert doc["details"]["simulation"]["pod_noise"] == POD_NOISE
    assert doc["details"]["simulation"]["span_windows"] == POD_SPAN_WINDOWS
    # the fifth recipe (one noise level): 0.762, 0.491 at 0.907, 0.894 at coverage 0.60; the fourth (one window per
    # pod): 0.737, 0.415 at 0.903, 0.883; the third recipe's model: 0.51 (it calls most of them mixed)
    assert got["accuracy"] > 0.76
    assert 0.45 <= got["coverage"] <= 0.53 and 0.89 <= got["selective_accuracy"] < 0.93
    curve = doc["details"]["pods_heldout_kinds_seed7"]["risk_coverage"]
    at_060 = next(a for c, a in zip(curve["coverage"], curve["selective_accuracy"], strict=True) if c >= 0.60)
    assert 0.90 <= at_060 < 0.92
    quiet = tmp_path / "quiet.json"
    assert eval_regime(["--basis", "pods", "--seed", "7", "--pod-noise", "0.006", "--out", str(quiet), "-q"]) == 0
    assert {r["metric"]: r["value"] for r in orjson.loads(quiet.read_bytes())["results"]}["accuracy"] > 0.73
    assert out.with_suffix(".png").stat().st_size > 0
    assert doc["details"]["basis"] == "pods"
    assert set(doc["details"]["heldout_kinds"]).isdisjoint(
        orjson.loads((MODEL_ROOT / (MODEL_ROOT / "CURRENT").read_text().strip() / "model_card.json").read_bytes())
        ["data"]["train_kinds"])


def test_eval_regime_pods_refuses_the_alibaba_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = eval_regime(["--basis", "pods", "--alibaba", str(tmp_path / "m.csv"), "--out", str(tmp_path / "o.json")])
    assert code == 2
    assert "no per-pod counters" in capsys.readouterr().err


def pod(name: str, uid_: str, namespace: str | None = "shop", labels: dict[str, str] | None = None,
        owner: tuple[str, str] | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "uid": uid_, "labels": labels or {}}
    if namespace is not None:
        meta["namespace"] = namespace
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "Node", "name": "not-a-controller"},
                                   {"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "n1"}}


def test_pod_jobs_name_each_pods_job_and_keep_a_gone_pod_for_the_grace() -> None:
    jobs = PodJobs("example.com/job", grace_s=60.0)
    jobs.update([pod("web-1", "u1", labels={"example.com/job": "web"}, owner=("ReplicaSet", "web-5d8f")),
                 pod("api-7c9-x", "u2", owner=("ReplicaSet", "api-7c9")),
                 pod("lone", "u3", namespace=None),
                 {"metadata": {"name": "no-uid"}}], now=0.0)
    assert jobs.job_of("u1") == "shop/web"  # the label wins over the controller
    assert jobs.job_of("u2") == "shop/ReplicaSet/api-7c9"  # replicas share their ReplicaSet
    assert jobs.job_of("u3") == "default/Pod/lone"
    assert len(jobs) == 3 and jobs.job_of("nobody") is None
    jobs.update([pod("api-7c9-x", "u2", owner=("ReplicaSet", "api-7c9"))], now=59.0)
    assert jobs.job_of("u1") == "shop/web"  # gone from the list, inside the grace: its last window still closes
    jobs.update([], now=61.0)
    assert jobs.job_of("u1") is None and jobs.job_of("u2") == "shop/ReplicaSet/api-7c9"


def test_a_label_says_the_answer_or_why_there_is_none() -> None:
    window = PodRegimeWindow("n1", 3, 1_700_000_010_000, np.zeros(N_COLUMNS, dtype=np.float32),
                             np.zeros(1, dtype=np.float32), pods=2, referenced=1)
    probs = np.array([0.05, 0.1, 0.7, 0.1, 0.05])
    answered = label_of(window, probs, 0, REGIMES, "v1", changed=True, input_ts_ms=1_700_000_011_000)
    assert (answered.regime, answered.raw_regime, answered.abstain, answered.changed) == ("membw", "membw", [], True)
    assert answered.confidence == pytest.approx(0.7) and answered.interference == {}
    assert (answered.ts_ms, answered.input_ts_ms) == (1_700_000_010_000, 1_700_000_011_000)
    unsure = label_of(window, probs, abstention.LOW_CONFIDENCE, REGIMES, "v1", changed=False,
                      input_ts_ms=1_700_000_011_000)
    assert (unsure.regime, unsure.confidence, unsure.abstain) == ("unknown", 0.0, ["low_confidence"])
    blind = label_of(window, probs, abstention.COUNTERS_MISSING | abstention.LOW_CONFIDENCE, REGIMES, "v1", False,
                     1_700_000_011_000)
    assert blind.abstain == ["counters_missing", "low_confidence"]


def test_train_regime_pods_quick_writes_a_version_the_stage_loads(tmp_path: Path) -> None:
    assert pod_model_main(["--quick", "--no-current", "--out", str(tmp_path)]) == 0
    (version,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (tmp_path / "CURRENT").exists()
    model = load_pod_regime_model(version)
    card = model.card
    assert card["data"]["train_kinds"] and set(card["data"]["train_kinds"]).isdisjoint(card["data"]["heldout_kinds"])
    fold = card["abstention"]["low_confidence"]["folds"][0]
    assert set(fold["unseen_kinds"]) <= set(card["data"]["train_kinds"])  # calibrated without the held-out kinds
    assert set(fold["unseen_kinds"]).isdisjoint(fold["fit_kinds"])
    training = card["data"]["training"]
    assert training["kinds"] == card["data"]["train_kinds"]  # the named kinds; the copies are counted
    assert training["jitter"]["copies"] == 4 and training["jitter"]["kinds"] == 5 * len(training["kinds"])
    assert not [k for k in KINDS if "~" in k]  # the copies are gone from the simulator once trained
    assert set(card["abstention"]["low_confidence"]["floors"]) == set(REGIMES)
    assert card["classifier"]["ensemble"]["members"] == 3 and len(card["data"]["draws"]) == 3
    assert len({draw["seed"] for draw in card["data"]["draws"]}) == 3  # each member its own cluster and copies
    assert len({draw["jitter"]["seed"] for draw in card["data"]["draws"]}) == 3
    assert fold["fit_draws"] == 3
    assert card["onnx"]["parity_max_abs_diff"] <= 1e-4  # the one ONNX file is the members' mean
    assert card["features"]["pod_span_windows"] == model.span_windows == POD_SPAN_WINDOWS  # fifth recipe
    assert all(draw["span_windows"] == POD_SPAN_WINDOWS for draw in card["data"]["draws"])
    # each member trained at its own noise level, the folds judged at their median (sixth recipe)
    assert card["data"]["pod_noise"] == list(POD_NOISE_LEVELS)
    assert [draw["pod_noise"] for draw in card["data"]["draws"]] == list(POD_NOISE_LEVELS)
    assert fold["unseen"]["pod_noise"] == card["data"]["calibration_pod_noise"] == POD_NOISE
    probs = model.predict(np.zeros((2, N_COLUMNS), dtype=np.float32))
    assert probs.shape == (2, 5) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)


def test_one_onnx_file_averages_the_members() -> None:
    import onnxmltools
    import xgboost as xgb
    from onnxmltools.convert.common.data_types import FloatTensorType

    from training.regime.artifacts import INPUT_NAME, mean_of_classifiers, session
    from training.regime.model import TARGET_OPSET

    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.5)  # 4 classes
    members = [xgb.XGBClassifier(n_estimators=15, max_depth=3, subsample=0.7, random_state=seed,
                                 objective="multi:softprob", num_class=4).fit(x, y) for seed in range(3)]
    types = [(INPUT_NAME, FloatTensorType([None, 6]))]
    merged = mean_of_classifiers([onnxmltools.convert_xgboost(m, initial_types=types, target_opset=TARGET_OPSET)
                                  for m in members], TARGET_OPSET)
    label, probs = session(merged).run(None, {INPUT_NAME: x})
    want = np.mean([m.predict_proba(x) for m in members], axis=0)
    assert not np.allclose(members[0].predict_proba(x), want, atol=1e-3)  # the members differ: a real average
    assert np.abs(probs - want).max() < 1e-5
    assert (label == want.argmax(axis=1)).all()
    with pytest.raises(ValueError, match="at least one"):
        mean_of_classifiers([], TARGET_OPSET)


def test_pod_noise_is_per_window_and_spreads_only_the_pods_counts() -> None:
    assert per_tick_noise(0.05) == pytest.approx(0.05 * math.sqrt(10))  # ten 1 s ticks per 10 s window
    assert per_tick_noise(0.05, interval_ms=10_000) == pytest.approx(0.05)
    with pytest.raises(ValueError, match=">= 0"):
        per_tick_noise(-0.1)
    with pytest.raises(ValueError, match="pod_noise"):
        PodCluster(nodes=2, seed=1, workloads=["crypto"], jobs_per_kind=1, pod_noise=-1.0)

    def spread(pod_noise: float | None) -> tuple[float, np.ndarray]:
        sim = PodCluster(nodes=2, seed=5, workloads=FOUR, jobs_per_kind=1, pod_noise=pod_noise)
        ratios, node = [], []
        for batch in sim.run(20):
            counts = sim.tick_pods(0)
            ratios.append(counts[0] / counts[0].sum())
            node.append(batch.values[0])
        return float(np.std(np.log(np.asarray(ratios)[:, :3]), axis=0).mean()), np.asarray(node)

    quiet, quiet_node = spread(0.0)
    noisy, noisy_node = spread(0.3)
    assert noisy > 5 * max(quiet, 1e-3)
    np.testing.assert_array_equal(quiet_node, noisy_node)  # the node's own counters are untouched
    # the eval's clusters record the noise they drew pods with; None keeps the cluster's per-tick noise
    assert simulate(FOUR, seed=2, nodes=2, ticks=30, pod_noise=0.05).params["pod_noise"] == 0.05
    assert "pod_noise" not in simulate(FOUR, seed=2, nodes=2, ticks=30).params


def test_eval_regime_pod_noise_needs_the_pod_basis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_regime(["--pod-noise", "0.05", "--out", str(tmp_path / "o.json")]) == 2
    assert "--pod-noise needs --basis pods" in capsys.readouterr().err
    assert eval_regime(["--basis", "pods", "--pod-noise", "-1", "--out", str(tmp_path / "o.json")]) == 2
    for bad in ("-0.5", "0.03,-0.01", "nan", "x", ","):
        with pytest.raises(SystemExit) as exit_info:
            pod_model_main(["--pod-noise", bad, "--out", str(tmp_path)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "argument --pod-noise" in err and repr(bad) in err
    with pytest.raises(SystemExit) as exit_info:
        pod_model_main(["--pod-noise", "0.03,0.05", "--draws", "3", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--pod-noise gives 2 levels for 3 draws: give one, or one per draw" in capsys.readouterr().err


def test_each_draw_trains_at_its_own_noise_level_and_the_folds_judge_at_their_median() -> None:
    assert parse_noise_levels("0.03, 0.05,0.08") == (0.03, 0.05, 0.08) == POD_NOISE_LEVELS
    assert [noise_of_draw((0.03, 0.05, 0.08), d) for d in range(4)] == [0.03, 0.05, 0.08, 0.03]  # cycling
    assert noise_of_draw(0.05, 2) == 0.05 and noise_of_draw(None, 1) is None
    assert median_noise((0.08, 0.03, 0.05)) == 0.05 and median_noise((0.02, 0.04)) == pytest.approx(0.03)
    assert median_noise(0.1) == 0.1 and median_noise(None) is None
    assert median_noise(POD_NOISE_LEVELS) == POD_NOISE  # calibrated at the arena's and eval's noise


def test_train_regime_pods_refuses_no_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pod_model_main(["--draws", "0", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--draws must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        pod_model_main(["--span-windows", "0", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"--span-windows must be 1..{SPAN_WINDOWS_MAX}, got 0" in capsys.readouterr().err


def test_train_regime_pods_names_a_bad_kinds_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pod_model_main(["--kinds-from", str(tmp_path / "nowhere"), "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--kinds-from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        pod_model_main(["--jitter-copies", "-1", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--jitter-copies must be >= 0, got -1" in capsys.readouterr().err



def test_the_pod_rows_judge_the_eval_clusters_windows_with_their_labels() -> None:
    """``borgctl eval regime --basis pods`` judges the very windows the node model's evaluation judges: same
    cluster, same panes, same labels, and the rows' node part is the node model's input row."""
    from training.regime.pod_model import simulate
    from training.regime.simwindows import simulate_windows

    kinds = ["search_index", "spmv", "video_encode", "web_frontend"]
    pods = simulate(kinds, seed=8, nodes=4, ticks=120)
    node = simulate_windows(kinds=kinds, nodes=4, ticks=120, seed=8)
    assert pods.regime.tolist() == node.regime.tolist()
    start = len(VICTIM_COLUMNS)
    np.testing.assert_array_equal(pods.x[:, start:start + node.x.shape[1]], node.x)
    assert (pods.x[:, COL["pods"]] >= 1).all()  # every simulated node runs pods and each is read


def test_recipe_splits_judges_each_recipe_on_each_splits_held_out_kinds(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.workloads import holdout_split
    from training.regime.recipe_splits import judged
    from training.regime.recipe_splits import main as recipe_splits

    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.45, 0.55], [0.4, 0.6]])
    got = judged(probs, np.array([0, 0, 1, 0, 0]))  # the 3 most confident are right, 2 of 5 wrong
    assert got == {"windows": 5, "accuracy": 0.6, "selective_accuracy_at_060": 1.0}
    out = tmp_path / "splits.json"
    assert recipe_splits(["--splits", "1", "--copies", "0,1", "--draws", "1,2", "--seeds", "7", "--nodes", "8",
                          "--ticks", "400", "--out", str(out)]) == 0
    rows = orjson.loads(out.read_bytes())["rows"]
    assert [(r["split"], r["copies"], r["draws"], r["seed"]) for r in rows] == [
        (1, 0, 1, 7), (1, 0, 2, 7), (1, 1, 1, 7), (1, 1, 2, 7)]
    assert all(r["heldout_kinds"] == list(holdout_split(seed=1)[1]) and r["windows"] > 0 for r in rows)
    assert orjson.loads(out.read_bytes())["span_windows"] == POD_SPAN_WINDOWS  # the shipped recipe's reading
    assert orjson.loads(out.read_bytes())["pod_noise"] == list(POD_NOISE_LEVELS)  # and its levels, one per draw
    assert not [k for k in KINDS if "~" in k]
    with pytest.raises(SystemExit):
        recipe_splits(["--span-windows", "0", "--out", str(out)])
    assert "--span-windows 1.." in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe_splits(["--splits", "x", "--out", str(out)])
    assert "expected comma-separated integers, got 'x'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe_splits(["--draws", "0", "--out", str(out)])
    assert "--draws >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # too small a cluster to hold every regime: one line, not a traceback
        recipe_splits(["--splits", "1", "--copies", "0", "--draws", "2", "--seeds", "7", "--nodes", "8", "--ticks",
                       "200", "--out", str(out)])
    assert "draw 2: no window of regime mixed" in capsys.readouterr().err
