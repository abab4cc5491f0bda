"""Pure node-feature math: metrics, windows, missing counters, wrap/reset, order and duplicates."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import numpy as np
import orjson
import pytest

from contracts import NodeState
from featurelib.node.panes import PaneAgg
from featurelib.node.samples import WRAP_LIMIT, Sample, sample_from_dict, sample_from_nodestate, sample_metrics
from featurelib.node.schema import (
    FEATURE_INDEX,
    HOP_MS,
    MI,
    N_FEATURES,
    NODE_FEATURE_NAMES,
    as_model_input,
    node_feature_schema_hash,
)
from featurelib.node.windows import DictStore, NodeWindows, Window, features_for_stream

T0 = 1_700_000_000_000
FULL = {
    "cycles": 2.0e9,
    "instructions": 3.0e9,
    "cache-references": 4.0e7,
    "cache-misses": 1.0e7,
    "LLC-loads": 2.0e7,
    "LLC-load-misses": 6.0e6,
    "branch-instructions": 5.0e8,
    "branch-misses": 1.5e7,
    "stalled-cycles-frontend": 2.0e8,
    "stalled-cycles-backend": 8.0e8,
    "mem-bandwidth-bytes": 2.5e10,
    "task-clock": 8.0e9,
    "context-switches": 1000.0,
    "page-faults": 99.0,
    "ref-cycles": 1.0e9,
}


def state(node: str, seq: int, ts: int, counters: dict[str, float] | None = None, **kw: object) -> dict[str, Any]:
    counters = FULL if counters is None else counters
    body = {
        name: {"raw": v, "value": v, "enabled_ns": 10**9, "running_ns": 10**9, "status": "counted"}
        for name, v in counters.items()
    }
    out = {
        "node": node,
        "ts_ms": ts,
        "seq": seq,
        "interval_ms": 1000,
        "source": "synthetic",
        "pmu": "hardware",
        "supported_events": sorted(counters),
        "counters": body,
        "cpu_util": 0.5,
        "mem_util": 0.25,
        "cpu_freq_mhz": 2500.0,
    }
    out.update(kw)
    return out


def metric(values: list[float | None], name: str) -> float | None:
    return values[MI[name]]


def test_metric_math() -> None:
    values, violations = sample_metrics(
        {k: v for k, v in FULL.items()}, cpu_util=0.5, mem_util=0.25, interval_ms=1000, recorded={}
    )
    assert violations == 0
    assert metric(values, "ipc") == pytest.approx(1.5)
    assert metric(values, "cpi") == pytest.approx(1 / 1.5)
    assert metric(values, "llc_mpki") == pytest.approx(6e6 / 3e9 * 1000)
    assert metric(values, "llc_miss_ratio") == pytest.approx(0.3)
    assert metric(values, "cache_mpki") == pytest.approx(1e7 / 3e9 * 1000)
    assert metric(values, "cache_miss_ratio") == pytest.approx(0.25)
    assert metric(values, "membw_gbs") == pytest.approx(25.0)
    assert metric(values, "membw_util") is None  # no peak bandwidth reported: not invented
    assert metric(values, "stall_frontend") == pytest.approx(0.1)
    assert metric(values, "stall_backend") == pytest.approx(0.4)
    assert metric(values, "branch_mpki") == pytest.approx(5.0)
    assert metric(values, "branch_miss_ratio") == pytest.approx(0.03)
    assert metric(values, "ctx_switches_log") == pytest.approx(math.log10(1001))
    assert metric(values, "page_faults_log") == pytest.approx(2.0)
    assert metric(values, "rec_mkpi") is None
    assert metric(values, "sanity_violation") == 0.0


def test_recorded_metrics_and_peak_bandwidth() -> None:
    values, _ = sample_metrics(
        dict(FULL), cpu_util=0.1, mem_util=0.2, interval_ms=2000,
        recorded={"mkpi": 2.0, "mem_gps": 3.5, "mem_bw_peak_gbs": 50.0},
    )
    assert metric(values, "membw_gbs") == pytest.approx(12.5)  # per second over a 2 s interval
    assert metric(values, "membw_util") == pytest.approx(0.25)
    assert metric(values, "rec_mkpi") == 2.0
    assert metric(values, "rec_mem_gps") == 3.5


def test_missing_counters_mark_features_invalid_never_invented() -> None:
    lacking = {k: v for k, v in FULL.items() if k not in ("LLC-loads", "LLC-load-misses", "mem-bandwidth-bytes")}
    windows = features_for_stream([sample_from_dict(state("n1", i, T0 + i * 1000, lacking)) for i in range(40)])
    assert windows
    w = windows[-1]
    for name in ("llc_mpki_mean_10s", "llc_miss_ratio_mean_60s", "membw_gbs_mean_300s", "membw_gbs_z_300s"):
        assert not w.valid[FEATURE_INDEX[name]], name
        assert w.values[FEATURE_INDEX[name]] == 0.0
    for name in ("ipc_mean_10s", "cache_mpki_mean_60s", "stall_backend_mean_300s", "cpu_util_mean_10s"):
        assert w.valid[FEATURE_INDEX[name]], name
    x = as_model_input(w.values, w.valid)
    assert x.dtype == np.float32 and math.isnan(x[FEATURE_INDEX["llc_mpki_mean_10s"]])


def test_not_supported_status_is_missing() -> None:
    d = state("n1", 0, T0)
    d["counters"]["cycles"] = {"raw": None, "value": None, "enabled_ns": 0, "running_ns": 0, "status": "not_supported"}
    s = sample_from_dict(d)
    assert s.metrics[MI["ipc"]] is None and s.metrics[MI["stall_backend"]] is None
    assert s.metrics[MI["cache_mpki"]] is not None


def test_counter_wrap_and_impossible_values_are_dropped_and_counted() -> None:
    wrapped = dict(FULL, instructions=WRAP_LIMIT + 5)  # a delta taken across a 48-bit wrap
    values, violations = sample_metrics(wrapped, cpu_util=0.5, mem_util=0.5, interval_ms=1000)
    assert violations == 1
    assert metric(values, "ipc") is None and metric(values, "llc_mpki") is None
    assert metric(values, "stall_backend") is not None  # cycles itself is fine
    assert metric(values, "sanity_violation") == 1.0
    impossible = dict(FULL, **{"cache-misses": 9e7})  # more misses than references (reset mid-interval)
    values, violations = sample_metrics(impossible, cpu_util=0.5, mem_util=0.5, interval_ms=1000)
    assert violations == 1 and metric(values, "cache_miss_ratio") is None
    assert metric(values, "cache_mpki") is not None
    # a reset counter right after the reset: tiny instruction count → IPC implausibly high
    reset = dict(FULL, cycles=10.0)
    values, violations = sample_metrics(reset, cpu_util=0.5, mem_util=0.5, interval_ms=1000)
    assert metric(values, "ipc") is None and violations >= 1


def test_wrap_inside_window_only_loses_that_sample() -> None:
    samples = []
    for i in range(10):
        counters = dict(FULL, instructions=WRAP_LIMIT * 2) if i == 4 else FULL
        samples.append(sample_from_dict(state("n1", i, i * 1000 + T0, counters)))
    machine = NodeWindows(DictStore(), spread=False)
    windows = [w for s in samples for w in machine.observe(s).windows]
    assert len(windows) == 1
    w = windows[0]
    assert w.values[FEATURE_INDEX["ipc_mean_10s"]] == pytest.approx(1.5)  # 9 good samples
    assert w.values[FEATURE_INDEX["sanity_violation_mean_10s"]] == pytest.approx(0.1)


def test_frequency_is_excluded() -> None:
    a = sample_from_dict(state("n1", 0, T0, cpu_freq_mhz=1200.0))
    b = sample_from_dict(state("n1", 0, T0, dict(FULL, **{"ref-cycles": 7e9}), cpu_freq_mhz=3900.0))
    assert a.metrics == b.metrics
    assert not any("freq" in n or "ref_cycles" in n for n in NODE_FEATURE_NAMES)


def _brute(per_sample: list[list[float | None]], j: int, lo: int, hi: int) -> tuple[float, float]:
    vals = [v for row in per_sample[lo:hi] if (v := row[j]) is not None]
    return float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


def test_hopping_windows_match_brute_force() -> None:
    rng = np.random.default_rng(3)
    samples = []
    for i in range(400):
        scale = 1.0 + 0.3 * rng.standard_normal()
        counters = {k: abs(v * (scale if k == "instructions" else 1.0 + 0.05 * rng.standard_normal()))
                    for k, v in FULL.items()}
        samples.append(sample_from_dict(state("n1", i, T0 + i * 1000, counters, cpu_util=float(rng.uniform(0, 1)))))
    machine = NodeWindows(DictStore(), spread=False)
    windows = [w for s in samples for w in machine.observe(s).windows]
    assert len(windows) == 40
    rows = [list(s.metrics) for s in samples]
    w = windows[-1]  # pane covers samples 390..399
    assert w.ts_ms == T0 + 400_000 and w.samples == 10
    j = MI["ipc"]
    for stat, lo in (("mean_10s", 390), ("mean_60s", 340), ("mean_300s", 100)):
        assert w.values[FEATURE_INDEX[f"ipc_{stat}"]] == pytest.approx(_brute(rows, j, lo, 400)[0], rel=1e-9)
    assert w.values[FEATURE_INDEX["ipc_std_60s"]] == pytest.approx(_brute(rows, j, 340, 400)[1], rel=1e-6)
    m10 = _brute(rows, j, 390, 400)[0]
    m300, sd300 = _brute(rows, j, 100, 400)
    assert w.values[FEATURE_INDEX["ipc_z_300s"]] == pytest.approx((m10 - m300) / sd300, rel=1e-6)
    prev = _brute(rows, j, 380, 390)[0]
    assert w.values[FEATURE_INDEX["ipc_delta_10s"]] == pytest.approx(m10 - prev, rel=1e-9)
    cu = MI["cpu_util"]
    assert w.values[FEATURE_INDEX["cpu_util_mean_60s"]] == pytest.approx(_brute(rows, cu, 340, 400)[0])
    # early windows: not enough history for the long stats yet
    first = windows[0]
    assert not first.valid[FEATURE_INDEX["ipc_delta_10s"]]
    assert first.valid[FEATURE_INDEX["ipc_mean_300s"]]  # mean over what exists
    assert len(w.values) == N_FEATURES


def _stream(nodes: int = 3, ticks: int = 120) -> list[Sample]:
    return [sample_from_dict(state(f"n{k}", i, T0 + i * 1000, {key: v * (1 + 0.01 * ((i * 7 + k) % 13))
                                                                   for key, v in FULL.items()}))
            for i in range(ticks) for k in range(nodes)]


def _by_key(windows: list[Window]) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {(w.node, w.ts_ms): (tuple(w.values), tuple(w.valid), w.samples) for w in windows}


def test_out_of_order_within_a_pane_gives_the_same_windows() -> None:
    samples = _stream(nodes=1, ticks=60)
    expected = _by_key(features_for_stream(samples))
    shuffled: list[Sample] = []
    rng = random.Random(5)
    machine = NodeWindows(DictStore())
    # shuffle inside each pane but keep the closing sample (last of its pane) last
    panes: dict[int, list[Sample]] = {}
    for s in samples:
        panes.setdefault(machine.pane_of(s.node, s.ts_ms), []).append(s)
    for idx in sorted(panes):
        group = panes[idx]
        head = group[:-1]
        rng.shuffle(head)
        shuffled += [*head, group[-1]]
    got = _by_key(features_for_stream(shuffled))
    assert got.keys() == expected.keys()
    for key in expected:
        # summation order differs: equal up to rounding (std via sums of squares)
        np.testing.assert_allclose(got[key][0], expected[key][0], rtol=1e-9, atol=1e-6)


def test_duplicates_are_ignored_and_late_samples_dropped() -> None:
    samples = _stream(nodes=2, ticks=50)
    expected = _by_key(features_for_stream(samples))
    machine = NodeWindows(DictStore())
    statuses: list[str] = []
    windows: list[Window] = []
    for i, s in enumerate(samples):
        out = machine.observe(s)
        windows += out.windows
        if i % 5 == 0:
            again = machine.observe(s)  # immediate duplicate
            statuses.append(again.status)
            windows += again.windows
    assert set(statuses) <= {"duplicate", "replayed"}
    assert _by_key(windows) == expected
    late = machine.observe(samples[0])
    assert late.status == "late" and not late.windows


def test_replayed_closing_sample_re_emits_identical_window() -> None:
    samples = _stream(nodes=1, ticks=30)
    machine = NodeWindows(DictStore())
    first: list[Window] = []
    for s in samples:
        first += machine.observe(s).windows
    closing = next(s for s in reversed(samples) if machine.pane_of(s.node, s.ts_ms + s.interval_ms)
                   > machine.pane_of(s.node, s.ts_ms))
    out = machine.observe(closing)
    assert out.status == "replayed" and len(out.windows) == 1
    original = next(w for w in first if w.pane == out.windows[0].pane)
    assert out.windows[0].values == original.values and out.windows[0].valid == original.valid


@pytest.mark.parametrize(("crash_at", "replay"), [(7, 7), (33, 12), (61, 30), (95, 9), (170, 50), (240, 3)])
def test_restart_from_store_snapshot_with_replay_loses_nothing(crash_at: int, replay: int) -> None:
    """Crash after the state of sample k was persisted, before offsets past k - replay were committed.

    Outputs are flushed before each commit, so only outputs of the uncommitted samples can be
    lost; here every one of them is lost (the worst case), and the replay must restore them.
    """
    samples = _stream(nodes=3, ticks=80)
    expected = _by_key(features_for_stream(samples))
    store = DictStore()
    machine = NodeWindows(store)
    emitted: list[Window] = []
    committed = max(0, crash_at - replay)
    for i, s in enumerate(samples[:crash_at]):
        out = machine.observe(s).windows
        if i < committed:
            emitted += out
    snapshot = copy.deepcopy(store.data)  # what the changelog restores
    restored = DictStore()
    restored.data = snapshot
    machine2 = NodeWindows(restored)
    for s in samples[committed:]:
        emitted += machine2.observe(s).windows
    got: dict[tuple[str, int], tuple[Any, ...]] = {}
    for w in emitted:
        key = (w.node, w.ts_ms)
        value = (tuple(w.values), tuple(w.valid), w.samples)
        assert got.setdefault(key, value) == value, "a re-emitted window differs from the original"
    assert got == expected


def test_seq_reset_after_agent_restart_is_accepted() -> None:
    machine = NodeWindows(DictStore(), spread=False)
    for i in range(5):
        machine.observe(sample_from_dict(state("n1", 100 + i, T0 + i * 1000)))
    out = machine.observe(sample_from_dict(state("n1", 0, T0 + 5000)))  # agent restarted, seq from 0
    assert out.status == "accepted"


def test_gap_closes_pane_on_next_pane_sample() -> None:
    machine = NodeWindows(DictStore(), spread=False)
    for i in range(6):  # samples 0..5 of pane 0, then the node goes quiet
        assert not machine.observe(sample_from_dict(state("n1", i, T0 + i * 1000))).windows
    out = machine.observe(sample_from_dict(state("n1", 30, T0 + 30_000)))
    assert len(out.windows) == 1
    w = out.windows[0]
    assert w.ts_ms == T0 + HOP_MS and w.samples == 6
    assert w.values[FEATURE_INDEX["samples_frac_10s"]] == pytest.approx(0.6)


def test_pane_phase_spreads_nodes_and_window_end_is_pane_end() -> None:
    machine = NodeWindows(DictStore())
    phases = {machine.phase(f"node-{i}") for i in range(50)}
    assert len(phases) > 40
    windows = features_for_stream(_stream(nodes=4, ticks=40))
    for w in windows:
        assert (w.ts_ms - machine.phase(w.node)) % HOP_MS == 0


def test_dict_and_model_paths_agree_on_simulator_output() -> None:
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=12, seed=4, missing_event_prob=0.5, multiplex_prob=0.5)
    for batch in sim.run(3):
        for d in batch.nodestate_dicts():
            model = NodeState.model_validate(d)
            assert sample_from_nodestate(model) == sample_from_dict(d)


def test_pane_roundtrip_and_schema_hash() -> None:
    p = PaneAgg(12)
    p.add([1.0, None, *([0.5] * (len(p.n) - 2))], T0)
    assert PaneAgg.from_bytes(p.to_bytes()) == p
    h = node_feature_schema_hash()
    assert len(h) == 64 and h == node_feature_schema_hash()
    assert len(set(NODE_FEATURE_NAMES)) == N_FEATURES


# ----------------------------------------------------------------------------- the service's mode


def _sim_samples(nodes: int = 8, ticks: int = 130, seed: int = 3) -> list[Sample]:
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=nodes, seed=seed, missing_event_prob=0.3, multiplex_prob=0.3)
    return [sample_from_dict(d) for batch in sim.run(ticks) for d in batch.nodestate_dicts()]


def test_batched_deferred_mode_gives_the_same_windows_as_one_by_one() -> None:
    samples = _sim_samples()
    expected = _by_key(features_for_stream(samples))
    machine = NodeWindows(DictStore(), write_through=False)
    got: list[Window] = []
    for i in range(0, len(samples), 97):
        for outcome in machine.observe_many(samples[i:i + 97]):
            got += outcome.windows
    assert _by_key(got) == expected  # bit-identical: the batched numpy pass does the same arithmetic


def _assert_replay_completes(samples: list[Sample], committed: int, changelog: DictStore, emitted: list[Window],
                             expected: dict[tuple[str, int], tuple[Any, ...]]) -> None:
    """A crash after the commit at ``committed``: outputs after it may be lost, the changelog survives.

    A new machine restored from the changelog, fed the input again from ``committed``, must
    give every window, each re-emitted one identical.
    """
    emitted = [w for w in emitted if w.input_ts_ms <= samples[committed - 1].input_ts_ms]
    restored = NodeWindows(changelog, write_through=False)
    for outcome in restored.observe_many(samples[committed:]):
        emitted += outcome.windows
    got: dict[tuple[str, int], tuple[Any, ...]] = {}
    for w in emitted:
        value = (tuple(w.values), tuple(w.valid), w.samples)
        assert got.setdefault((w.node, w.ts_ms), value) == value, "a re-emitted window differs"
    assert got == expected


def test_checkpoint_restore_and_replay_lose_nothing() -> None:
    """The service's crash: state checkpointed at commit k, input after an earlier commit delivered again."""
    samples = _sim_samples(nodes=6, ticks=120, seed=9)
    expected = _by_key(features_for_stream(samples))
    changelog = DictStore()
    machine = NodeWindows(DictStore(), write_through=False)
    emitted: list[Window] = []
    committed = 0
    for i in range(0, 500, 50):
        for outcome in machine.observe_many(samples[i:i + 50]):
            emitted += outcome.windows
        assert machine.dirty > 0
        machine.checkpoint(lambda _node, key, value: changelog.put(key, value))
        assert machine.dirty == 0
        committed = i + 50 if i < 400 else committed  # the last commits never happened
    _assert_replay_completes(samples, committed, changelog, emitted, expected)


@pytest.mark.parametrize("crash_after", [205, 333, 452, 611])
def test_sliced_checkpoints_beside_new_samples_lose_nothing(crash_after: int) -> None:
    """The service's commit round: positions noted, then state written in slices while batches go on.

    What is durable is newer than the committed positions (nodes written later in a round
    carry samples after the note); a crash can also cut a round between slices. Replaying
    from the last completed round's note must still give every window, identically.
    """
    samples = _sim_samples(nodes=6, ticks=120, seed=11)
    expected = _by_key(features_for_stream(samples))
    changelog = DictStore()
    machine = NodeWindows(DictStore(), write_through=False)
    emitted: list[Window] = []
    committed = 0
    i = 0

    def observe(n: int) -> None:
        nonlocal i, emitted
        for outcome in machine.observe_many(samples[i:min(i + n, crash_after)]):
            emitted += outcome.windows
        i = min(i + n, crash_after)

    while i < crash_after:
        observe(50)
        noted, nodes = i, machine.dirty_nodes()
        assert nodes
        for k in range(0, len(nodes), 2):
            if i >= crash_after:
                break  # crashed mid-round: some slices written, the round never committed
            machine.write_nodes(nodes[k:k + 2], lambda _node, key, value: changelog.put(key, value))
            observe(7)
        else:
            committed = noted
    assert 0 < committed < crash_after
    _assert_replay_completes(samples, committed, changelog, emitted, expected)


def test_write_nodes_skips_forgotten_and_clean_nodes() -> None:
    samples = _sim_samples(nodes=3, ticks=15, seed=6)
    machine = NodeWindows(DictStore(), write_through=False)
    machine.observe_many(samples)
    nodes = machine.dirty_nodes()
    assert len(nodes) == 3 and machine.dirty > 3  # open panes plus the panes they closed
    machine.forget({nodes[0]})
    written: list[str] = []
    assert machine.write_nodes(nodes, lambda _node, key, _value: written.append(key)) == len(written)
    assert {k.split("|")[0] for k in written} == set(nodes[1:])
    # per node, its closed panes come before its open pane record
    for node in nodes[1:]:
        keys = [k for k in written if k.split("|")[0] == node]
        assert keys[-1] == node and all("|" in k for k in keys[:-1]) and len(keys) > 1
    assert machine.dirty == 0 and machine.write_nodes(nodes, lambda *_: written.append("x")) == 0


def test_open_pane_record_layouts_restore_the_same_state() -> None:
    samples = _sim_samples(nodes=2, ticks=25, seed=4)
    machine = NodeWindows(DictStore(), write_through=False)
    machine.observe_many(samples)
    binary = DictStore()
    machine.checkpoint(lambda _node, key, value: binary.put(key, value))
    node = samples[0].node
    assert binary.data[node][:1] == b"\x01"
    st = machine._state(node)
    assert st.open is not None
    legacy = DictStore()
    legacy.data = dict(binary.data)
    legacy.data[node] = orjson.dumps({"p": st.open.index, "n": st.open.n, "s": st.open.s, "q": st.open.q,
                                      "cnt": st.open.samples, "in": st.open.input_ts_ms, "exp": st.open.expected,
                                      "ids": st.ids, "emits": st.emits})
    for store in (binary, legacy):
        again = NodeWindows(store, write_through=False)._state(node)
        assert again.open is not None
        assert (again.open.index, again.open.n, again.open.s, again.open.q, again.ids, again.emits) == (
            st.open.index, st.open.n, st.open.s, st.open.q, st.ids, st.emits)
        assert (again.ring == st.ring).all() and (again.meta == st.meta).all()


def test_forget_drops_state_and_a_bad_sample_fails_alone() -> None:
    samples = _sim_samples(nodes=3, ticks=12, seed=2)
    machine = NodeWindows(DictStore(), write_through=False)
    machine.observe_many(samples)
    assert len(machine) == 3
    machine.forget({samples[0].node})
    assert len(machine) == 2 and machine.dirty < 3 + 3
    huge = Sample("n-huge", 2**63, T0, 1000, T0, samples[0].metrics)
    outcomes = machine.observe_many([huge, samples[1]])
    assert outcomes[0].status == "failed" and "64-bit" in (outcomes[0].error or "")
    assert outcomes[1].status in ("duplicate", "replayed")  # seen before: not counted twice
