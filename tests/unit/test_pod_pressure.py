"""The pod-pressure stage's pure parts: pod cgroups, 10 s windows, abstention, the shipped model on simulated
pods of held-out kinds, the record contract, model refusals, and the live arena's scoring of estimates."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from contracts.fast.nodestate import decode_nodestate_dict
from contracts.models import PodPressure
from featurelib.pod import EXTENDED_EVENTS, WINDOW_S, PodWindow, PodWindows, pod_features, pod_uid_of
from loadtests.arena_live.run import score_pod_pressure
from services.pod_pressure.model import RESOURCES, load_pod_pressure_model
from services.pod_pressure.processor import assess, record_of
from services.runtime.model_watch import ModelRefusedError
from simulator.arena.orchestrator import JobCpi
from simulator.arena.world import ArenaCluster
from simulator.cluster import COL, node_specs_for, workload_rates
from simulator.workloads import KINDS

ROOT = Path(__file__).resolve().parents[2]
MODEL_ROOT = ROOT / "models" / "pod_pressure"
UID = "0f6c1a2b-1234-4abc-9def-0123456789ab"
T0 = 1_790_000_000_000


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    return load_pod_pressure_model(MODEL_ROOT / (MODEL_ROOT / "CURRENT").read_text().strip())


def counters(counts: dict[str, float]) -> dict[str, dict[str, object]]:
    return {e: {"raw": v, "value": v, "enabled_ns": 10**9, "running_ns": 10**9, "status": "counted"}
            for e, v in counts.items()}


def test_pod_uid_of_reads_both_kubelet_layouts_and_only_the_pod_level() -> None:
    assert pod_uid_of(f"kubepods/burstable/pod{UID}") == UID
    assert pod_uid_of(f"kubepods/pod{UID}/") == UID
    systemd = f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice"
    assert pod_uid_of(systemd) == UID
    assert pod_uid_of(f"kubepods/burstable/pod{UID}/0123abcd") is None  # a container: counted in the pod's
    assert pod_uid_of("system.slice/sshd.service") is None
    assert pod_uid_of("kubepods/burstable") is None


def test_windows_sum_a_pods_counts_over_ten_seconds_of_its_node() -> None:
    windows = PodWindows(EXTENDED_EVENTS)
    pod, other = f"kubepods/pod{UID}", "kubepods/besteffort/pod11111111-2222-3333-4444-555555555555"
    one = dict.fromkeys(EXTENDED_EVENTS, 100.0)
    for t in range(1, 10):
        cgroups = {pod: counters(one), "system.slice": counters(one)}
        if t >= 6:
            cgroups[other] = counters(one)
        assert windows.observe("n1", t * 1000, 1000, cgroups, input_ts_ms=t) == []
        assert windows.is_open("n1")
    done = windows.observe("n1", 10_000, 1000, {pod: counters(one)}, input_ts_ms=10)
    assert not windows.is_open("n1")
    by_uid = {w.pod_uid: w for w in done}
    assert set(by_uid) == {UID, "11111111-2222-3333-4444-555555555555"}  # system.slice is not a pod
    assert by_uid[UID].counts["instructions"] == 1000.0 and by_uid[UID].window_ms == 10_000
    late = by_uid["11111111-2222-3333-4444-555555555555"]
    assert late.counts["cycles"] == 400.0 and late.window_ms == 4000  # only the samples it appeared in
    assert by_uid[UID].ts_ms == 10_000 and by_uid[UID].input_ts_ms == 10 and by_uid[UID].missing == ()


def test_windows_mark_missing_events_and_stay_bounded() -> None:
    windows = PodWindows(EXTENDED_EVENTS, window_s=2, max_pods=2, max_nodes=2)
    basic = counters({e: 5.0 for e in ("cycles", "instructions", "cache-misses", "task-clock", "context-switches")})
    basic["branch-misses"] = {"raw": None, "value": None, "enabled_ns": 0, "running_ns": 0, "status": "not_counted"}
    pods = {f"kubepods/pod{i:08d}-0000-0000-0000-000000000000": basic for i in range(5)}
    windows.observe("a", 1000, 1000, pods)
    done = windows.observe("a", 2000, 1000, pods)
    assert len(done) == 2 and windows.dropped_pods == 6  # 3 pods over the bound, twice
    assert done[0].missing == ("branch-instructions", "branch-misses", "cache-references")
    for node in ("b", "c", "d"):
        windows.observe(node, 1000, 1000, pods)
    assert not windows.is_open("b") and windows.is_open("c") and windows.is_open("d")  # longest idle forgotten


def window_of(counts: dict[str, float], seconds: float = WINDOW_S, missing: tuple[str, ...] = ()) -> PodWindow:
    return PodWindow("n1", f"kubepods/pod{UID}", UID, T0, int(seconds * 1000), counts, missing, T0 - 500)


def simulated_pods(kinds: list[str], n: int, seed: int) -> tuple[list[PodWindow], np.ndarray]:
    """Pods of ``kinds`` beside 1–4 co-runners of any kind, their counts over 10 s from the simulator."""
    rng = np.random.default_rng(seed)
    specs = node_specs_for(seed)
    windows, truth = [], []
    for _ in range(n):
        corunners = [str(k) for k in rng.choice(sorted(KINDS), size=int(rng.integers(1, 5)))]
        mix = [kinds[int(rng.integers(len(kinds)))], *corunners]
        inten = rng.uniform(0.5, 1.0, size=len(mix))
        pressures = np.array([KINDS[k].pressure for k in mix]) * inten[:, None]
        per, _, _, _ = workload_rates(specs[int(rng.integers(len(specs)))], mix, inten, pressures, rng)
        windows.append(window_of({e: float(per[0][COL[e]] * WINDOW_S) for e in EXTENDED_EVENTS}))
        truth.append(pressures[0])
    return windows, np.asarray(truth)


def test_shipped_model_estimates_held_out_kinds_and_says_why_when_it_cannot(model) -> None:  # type: ignore[no-untyped-def]
    held = list(model.card["data"]["heldout_kinds"])
    assert not set(held) & set(model.card["data"]["train_kinds"])
    windows, truth = simulated_pods(held, 300, seed=41)
    results = assess(windows, model)
    answered = [(i, p) for i, (reason, _, p) in enumerate(results) if reason is None and p is not None]
    assert len(answered) >= 0.9 * len(windows)
    pred = np.array([p for _, p in answered])
    mae = np.abs(pred - truth[[i for i, _ in answered]]).mean(axis=0)
    # the card's held-out MAE is 0.05–0.09 per resource; the constant guess (the truth's mean) is far worse
    guess = np.abs(truth - truth.mean(axis=0)).mean(axis=0)
    assert np.all(mae < 0.12) and np.all(mae < 0.8 * guess), (mae, guess)

    base = windows[0].counts
    cases = [
        window_of(base, missing=("branch-misses",)),
        window_of({**base, "instructions": 0.0}),
        window_of({**base, "instructions": base["cycles"] * 50}),  # IPC 50: nothing trained looks like it
    ]
    reasons = [r for r, _, _ in assess(cases, model)]
    assert reasons == ["counters_missing", "idle", "out_of_range"]


def test_serving_features_are_the_trainers_function_of_the_summed_counts(model) -> None:  # type: ignore[no-untyped-def]
    windows, _ = simulated_pods(["spmv"], 1, seed=5)
    total = windows[0].counts
    stage = PodWindows(EXTENDED_EVENTS)
    done: list[PodWindow] = []
    for t in range(1, 11):
        tenth = counters({e: v / 10 for e, v in total.items()})
        done = stage.observe("n1", t * 1000, 1000, {f"kubepods/pod{UID}": tenth})
    (_, features, _), = assess(done, model)
    assert features is not None
    np.testing.assert_allclose(features, pod_features(total, WINDOW_S), rtol=1e-9)


def test_records_carry_pressures_exactly_when_answered(model) -> None:  # type: ignore[no-untyped-def]
    windows, _ = simulated_pods(["spmv"], 1, seed=5)
    (reason, features, pressures), = assess(windows, model)
    ok = record_of(windows[0], reason, features, pressures, model.version)
    assert ok.status == "ok" and ok.reason is None and ok.ipc is not None and ok.ipc > 0
    assert all(0.0 <= getattr(ok, r) <= 1.0 for r in RESOURCES)
    assert PodPressure.model_validate_json(ok.model_dump_json()) == ok
    unknown = record_of(windows[0], "idle", None, None, model.version)
    assert unknown.status == "unknown" and unknown.llc is None and unknown.reason == "idle"
    with pytest.raises(ValueError, match="exactly when status is 'ok'"):
        PodPressure(**{**ok.model_dump(), "status": "unknown", "reason": "idle"})
    with pytest.raises(ValueError, match="exactly when status is 'ok'"):
        PodPressure(**{**ok.model_dump(), "core": None})


def test_a_tampered_or_foreign_model_is_refused(model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    version = tmp_path / "v"
    shutil.copytree(MODEL_ROOT / model.version, version)
    (version / "llc.onnx").write_bytes((version / "llc.onnx").read_bytes() + b"x")
    with pytest.raises(ModelRefusedError, match="sha256"):
        load_pod_pressure_model(version)
    card = orjson.loads((version / "model_card.json").read_bytes())
    card["sha256"]["llc.onnx"] = hashlib.sha256((version / "llc.onnx").read_bytes()).hexdigest()
    card["features"]["schema_hash"] = "0" * 64
    (version / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match="feature schema"):
        load_pod_pressure_model(version)


def test_arena_cluster_publishes_each_pods_cgroup_counts() -> None:
    cluster = ArenaCluster(2, seed=3, interval_ms=1000, missing_event_prob=0.0, multiplex_prob=0.0)
    uids = [UID, "11111111-2222-3333-4444-555555555555"]
    cluster.set_corunners(0, ["spmv", "search_index"], [1.0, 0.8], uids)
    state = cluster.tick().nodestate_dicts(ts_ms=1_790_000_000_000)[0]
    state["cgroups"] = cluster.cgroup_dicts(0, 1.0)
    decoded = decode_nodestate_dict(orjson.dumps(state))  # a valid NodeState with per-pod counters
    assert sorted(str(pod_uid_of(c)) for c in decoded["cgroups"]) == sorted(uids)
    pods_instr = sum(c["instructions"]["value"] for c in decoded["cgroups"].values())
    assert pods_instr == pytest.approx(state["counters"]["instructions"]["value"], rel=0.15)
    assert cluster.pod_pressures(0)[UID] == pytest.approx(tuple(KINDS["spmv"].pressure))
    assert cluster.cgroup_dicts(1, 1.0) == {} and cluster.pod_pressures(1) == {}
    with pytest.raises(ValueError, match="2 pod UIDs for 1 workloads"):
        cluster.set_corunners(1, ["spmv"], [1.0], uids)


def test_arena_cluster_adds_resctrl_readings_the_stage_reads_as_each_pods_share() -> None:
    from featurelib.pod import LLC_OCCUPANCY, MBM_TOTAL_BYTES, NODE_LLC_BYTES, NODE_MEMBW_PEAK
    from services.pod_pressure.monitored import reading

    cluster = ArenaCluster(1, seed=3, interval_ms=1000, monitor_noise=0.0, missing_event_prob=0.0,
                           multiplex_prob=0.0)
    other = "11111111-2222-3333-4444-555555555555"
    # llc: 0.80 + 0.85 demanded, more than the cache: each holds its share; membw: 0.30 + 0.40, room for both
    cluster.set_corunners(0, ["kv_cache", "graph_bfs"], [1.0, 1.0], [UID, other])
    windows = PodWindows(EXTENDED_EVENTS, window_s=2)
    done: list[PodWindow] = []
    for t in (1, 2):
        state = cluster.tick().nodestate_dicts(ts_ms=1_790_000_000_000 + t * 1000)[0]
        cgroups = cluster.cgroup_dicts(0, 1.0)
        for cgroup, readings in cluster.resctrl_dicts(0, 1.0).items():
            cgroups[cgroup].update(readings)
        state["cgroups"], state["metrics"] = cgroups, cluster.monitored_metrics()
        decoded = decode_nodestate_dict(orjson.dumps(state))  # a valid NodeState with the readings
        done = windows.observe("n", t * 1000, 1000, decoded["cgroups"])
    scales = state["metrics"]
    got = {pod_uid_of(w.cgroup): (reading(w, LLC_OCCUPANCY, scales[NODE_LLC_BYTES]),
                                  reading(w, MBM_TOTAL_BYTES, scales[NODE_MEMBW_PEAK])) for w in done}
    assert got[UID] == pytest.approx((0.80 / 1.65, 0.30))
    assert got[other] == pytest.approx((0.85 / 1.65, 0.40))
    # the spread is one factor per pod and resource, kept while the pod lives (the offline `window` reading)
    spread = ArenaCluster(1, seed=3, interval_ms=1000, monitor_noise=0.3)
    spread.set_corunners(0, ["kv_cache", "graph_bfs"], [1.0, 1.0], [UID, other])
    noisy = [spread.resctrl_dicts(0, 1.0)[f"kubepods/burstable/pod{UID}"] for _ in range(2)]
    assert noisy[0] == noisy[1] and noisy[0][LLC_OCCUPANCY]["value"] != pytest.approx(0.80 / 1.65 * 32 * 2**20)
    assert cluster.resctrl_dicts(0, 1.0).keys() == cluster.cgroup_dicts(0, 1.0).keys()
    with pytest.raises(ValueError, match="monitor_noise must be >= 0"):
        ArenaCluster(1, seed=3, interval_ms=1000, monitor_noise=-0.1)


def test_live_scores_compare_estimates_with_the_truth() -> None:
    def rec(uid: str, status: str, llc: float | None = None) -> SimpleNamespace:
        return SimpleNamespace(pod_uid=uid, status=status, llc=llc, membw=0.1 if llc else None,
                               core=0.5 if llc else None, frontend=0.2 if llc else None)

    truth: dict[str, tuple[float, ...]] = {"a": (0.5, 0.1, 0.5, 0.2), "b": (0.2, 0.1, 0.25, 0.2)}
    out = score_pod_pressure([rec("a", "ok", 0.5 * np.e), rec("a", "unknown"), rec("b", "ok", 0.2),
                              rec("stranger", "ok", 0.9)], truth)
    assert out["pod_pressure_records"] == 4 and out["pod_pressure_pods"] == 2
    assert out["pod_pressure_answered"] == pytest.approx(2 / 3)
    assert out["pod_pressure_llc_mae"] == pytest.approx((0.5 * np.e - 0.5) / 2)
    assert out["pod_pressure_llc_log_sigma"] == pytest.approx(1.0)  # only pod a is above the free 0.25
    assert out["pod_pressure_core_log_sigma"] == pytest.approx(0.0)
    assert "pod_pressure_membw_log_sigma" not in out  # no pod presses membw beyond 0.25


def test_train_pod_pressure_writes_a_version_the_stage_loads(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from training.pod_pressure import train_pod_pressure

    assert train_pod_pressure(["--out", str(tmp_path), "--quick", "--quiet", "--version", "v1"]) == 0
    assert (tmp_path / "CURRENT").read_text().strip() == "v1"
    served = load_pod_pressure_model(tmp_path / "v1")
    card = served.card
    assert card["data"]["pods"] == 4_000 and set(card["evaluation"]["heldout_kinds"]) == set(RESOURCES)
    assert all(card["evaluation"]["heldout_kinds"][r]["mae"] < 0.2 for r in RESOURCES)
    assert train_pod_pressure(["--out", str(tmp_path), "--quick", "--quiet", "--version", "v1"]) == 2
    assert train_pod_pressure(["--out", str(tmp_path), "--pods", "5"]) == 2
    err = capsys.readouterr().err
    assert "v1 exists" in err and "--pods must be at least 100, got 5" in err


def test_averaging_check_separates_a_kinds_bias_from_window_noise() -> None:
    from training.pod_pressure import averaging_errors, repeated, within_kind_sigma

    truth = np.array([[0.5, 0.5, 0.5, 0.5], [0.8, 0.8, 0.8, 0.8], [0.4, 0.4, 0.4, 0.4]])
    # kind a is estimated 2x too high on every pod, kind b exactly: no spread is left within a kind
    biased = truth * np.array([[2.0], [2.0], [1.0]])
    assert within_kind_sigma(biased, truth, ["a", "a", "b"]) == pytest.approx(dict.fromkeys(RESOURCES, 0.0))
    # grouped otherwise, b's two pods disagree by the factor 2 (log 2 = 0.69): sqrt(2 * 0.347**2 / 3) = 0.283
    assert within_kind_sigma(biased, truth, ["a", "b", "b"])["llc"] == pytest.approx(0.283, abs=1e-3)

    class Noisy:
        """Each window's estimate: the truth times exp(+-0.3), alternating: the mean of two windows is nearly exact."""

        def predict(self, rows: np.ndarray) -> np.ndarray:
            return np.asarray(rows, dtype=np.float64)

    windows = [np.vstack([t * np.exp(0.3), t * np.exp(-0.3)]) for t in truth]
    out = averaging_errors(Noisy(), windows, truth, ["a", "a", "b"])  # type: ignore[arg-type]
    assert out["one_window"]["llc"]["log_ratio_sigma"] == pytest.approx(0.3)
    assert out["mean_of_windows"]["llc"]["log_ratio_sigma"] < 0.05

    pods, true, kinds = repeated(3, list(KINDS)[:1], list(KINDS), windows=4, seed=1)
    assert [p.shape[0] for p in pods] == [4, 4, 4] and true.shape == (3, 4) and len(set(kinds)) == 1
    assert all(np.ptp(p, axis=0).max() > 0 for p in pods), "each window has new co-runners and noise"


def test_job_relative_slowdown_by_hand() -> None:
    cpi = JobCpi(quantile=0.5, min_samples=3)
    cpi.record(7, 1, 2.0)
    cpi.record(7, 2, 2.0)
    assert cpi.slowdown(7, 1) is None  # two samples: too few to know the job's normal IPC
    cpi.record(7, 3, 1.0)
    assert cpi.slowdown(7, 3) == pytest.approx(2.0)  # median 2.0 / its 1.0
    assert cpi.slowdown(7, 1) == 1.0  # never below 1
    assert cpi.slowdown(7, 99) is None and cpi.slowdown(8, 1) is None  # unknown pod, unknown job
    with pytest.raises(ValueError, match="window"):
        JobCpi(window=0)


def test_job_relative_slowdown_averages_a_pods_last_windows() -> None:
    single, smoothed = JobCpi(quantile=0.5, window=1), JobCpi(quantile=0.5, window=3)
    for cpi in (single, smoothed):
        for task in (1, 2, 3):
            cpi.record(7, task, 2.0)
        for ipc in (2.0, 2.0, 1.0):  # one low window of a pod that is not slowed
            cpi.record(7, 4, ipc)
    assert single.slowdown(7, 4) == pytest.approx(2.0)
    assert smoothed.slowdown(7, 4) == pytest.approx(2.0 / (5.0 / 3.0))
    assert smoothed.ipc_now(4) == pytest.approx(5.0 / 3.0) and smoothed.ipc_now(5) is None


def test_pod_reference_needs_three_pods_and_compares_means() -> None:
    cpi = JobCpi(quantile=1.0, window=2, reference="pods")
    for ipc in (2.0, 1.8, 2.2):  # one pod's windows: no other pod to compare with
        cpi.record(7, 1, ipc)
    assert cpi.slowdown(7, 1) is None
    samples = JobCpi(quantile=1.0, window=2)  # the sample reference judges it against its own noise
    for ipc in (2.0, 1.8, 2.2):
        samples.record(7, 1, ipc)
    assert samples.slowdown(7, 1) == pytest.approx(2.2 / 2.0)
    cpi.record(7, 2, 1.0)
    cpi.record(7, 2, 1.0)
    cpi.record(7, 3, 2.0)
    assert cpi.slowdown(7, 2) == pytest.approx(2.0)  # best pod mean 2.0 (pod 1: (1.8 + 2.2) / 2) over its 1.0
    assert cpi.slowdown(7, 3) == 1.0


def test_pod_reference_forgets_the_oldest_pods_beyond_keep() -> None:
    cpi = JobCpi(quantile=1.0, keep=3, min_samples=2, reference="pods")
    cpi.record(7, 1, 4.0)  # the oldest, and the job's best
    for task in (2, 3, 4):
        cpi.record(7, task, 1.0 + task / 10)
    assert cpi.ipc_now(1) is None and list(cpi.pods[7]) == [2, 3, 4]
    assert cpi.slowdown(7, 2) == pytest.approx(1.4 / 1.2)


def test_drawn_epochs_carry_the_regime_they_were_drawn_for() -> None:
    from simulator.cluster import SyntheticCluster
    from simulator.workloads import regime_of

    for regime in ("none", "llc", "membw", "core", "mixed"):
        sim = SyntheticCluster(nodes=2, seed=4, regime_weights={regime: 1.0})
        for _ in range(20):
            kinds, inten = sim.draw_epoch()
            pressures = np.array([KINDS[k].pressure for k in kinds]) * inten[:, None]
            assert len(kinds) == len(inten) >= 1 and regime_of(pressures) == regime


def test_regime_from_pods_scores_the_labels_rule_on_the_estimates() -> None:
    from training.pod_pressure import regime_from_pods, train

    kinds = sorted(KINDS)
    model = train(kinds, pods=1_500, seed=3)
    out = regime_from_pods(model, kinds, seed=5, epochs=150, nodes=4)
    assert out["windows"] == 150 and out["coverage"] == 1.0
    assert out["accuracy"] > 0.5  # chance is 0.2: five regimes drawn equally often
    assert set(out["recall"]) == {"none", "llc", "membw", "core", "mixed"}
    curve = out["selective_accuracy_at"]
    assert curve["1.00"] == pytest.approx(out["accuracy"])
    assert curve["0.30"] >= out["accuracy"]  # the confident third is right more often

    class Constant:
        """Every pod pressing 0.2 on everything: every node reads as ``none``."""

        extended = True

        def predict(self, x: np.ndarray) -> np.ndarray:
            return np.full((len(x), 4), 0.2)

    none = regime_from_pods(Constant(), kinds, seed=5, epochs=100, nodes=4)  # type: ignore[arg-type]
    assert none["recall"]["none"] == 1.0 and none["recall"]["llc"] == 0.0
    assert 0.05 < none["accuracy"] < 0.4  # right exactly on the nodes truly without contention (~1 in 5)
