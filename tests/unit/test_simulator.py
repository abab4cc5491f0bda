"""The seeded synthetic cluster: determinism, labels that follow the mechanism, conservative interference."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from contracts import NodeState
from contracts.models import REGIMES, WORKLOAD_CLASSES
from simulator import (
    ANOMALY_KINDS,
    EVENTS,
    KINDS,
    KINDS_BY_CLASS,
    NOT_SUPPORTED,
    SyntheticCluster,
    class_slowdowns,
    holdout_split,
    regime_of,
)
from simulator.workloads import SENSITIVITY_MATRIX, excess


def _run(seed: int, ticks: int = 40, **kw: object) -> list:  # type: ignore[type-arg]
    return list(SyntheticCluster(nodes=12, seed=seed, anomaly_rate=0.01, **kw).run(ticks))  # type: ignore[arg-type]


def test_deterministic_under_seed() -> None:
    a, b = _run(5), _run(5)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.values, y.values)
        np.testing.assert_array_equal(x.raw, y.raw)
        np.testing.assert_array_equal(x.cpu_util, y.cpu_util)
        assert x.truth_records() == y.truth_records()
        assert x.nodestate_dicts() == y.nodestate_dicts()
    c = _run(6)
    assert not np.array_equal(np.nan_to_num(a[-1].values), np.nan_to_num(c[-1].values))


def test_every_regime_and_class_is_used_and_names_come_from_the_contracts() -> None:
    sim = SyntheticCluster(nodes=50, seed=1, epoch_ticks=(5, 10))
    seen: Counter[str] = Counter()
    classes: set[str] = set()
    for batch in sim.run(60):
        seen.update(batch.regimes())
        for record in batch.truth_records():
            classes.update(record["co_runner_classes"])
            assert set(record["slowdown"]) == set(WORKLOAD_CLASSES)
    assert set(seen) == set(REGIMES)
    assert classes == set(WORKLOAD_CLASSES)
    assert all(k.workload_class in WORKLOAD_CLASSES for k in KINDS.values())
    assert all(len(kinds) >= 3 for kinds in KINDS_BY_CLASS.values())


def test_labels_follow_the_worst_co_runner() -> None:
    sim = SyntheticCluster(nodes=30, seed=2, epoch_ticks=(3, 6))
    for batch in sim.run(30):
        for i, spec in enumerate(batch.nodes):
            epoch = sim._epochs[i]
            assert epoch is not None
            assert spec.name
            assert REGIMES[int(batch.regime[i])] == regime_of(epoch.pressures)
            np.testing.assert_allclose(batch.slowdown[i], class_slowdowns(epoch.pressures))


def test_interference_is_the_max_over_co_runners_never_the_sum() -> None:
    a = np.array([[0.9, 0.1, 0.1, 0.1]])  # an LLC aggressor
    b = np.array([[0.85, 0.2, 0.1, 0.1]])  # another one
    both = class_slowdowns(np.vstack([a, b]))
    np.testing.assert_allclose(both, np.maximum(class_slowdowns(a), class_slowdowns(b)))
    summed = 1 + (class_slowdowns(a) - 1) + (class_slowdowns(b) - 1)
    assert (both < summed).all()
    manual = 1.0 + SENSITIVITY_MATRIX @ excess(a[0])
    np.testing.assert_allclose(class_slowdowns(a), manual)
    assert regime_of(np.vstack([a, b])) == "llc"
    assert regime_of(np.array([[0.9, 0.1, 0.1, 0.1], [0.1, 0.9, 0.1, 0.1]])) == "mixed"
    assert regime_of(np.array([[0.1, 0.1, 0.1, 0.8]])) == "core"  # frontend pressure is core contention
    assert regime_of(np.array([[0.3, 0.3, 0.3, 0.3]])) == "none"


def test_counters_respond_to_contention() -> None:
    only = {r: 1.0 if r in ("none", "membw") else 0.0 for r in REGIMES}
    sim = SyntheticCluster(nodes=200, seed=3, regime_weights=only, missing_event_prob=0, multiplex_prob=0)
    batch = next(sim.run(1))
    c = {name: i for i, name in enumerate(EVENTS)}
    bandwidth = batch.values[:, c["mem-bandwidth-bytes"]]
    ipc = batch.values[:, c["instructions"]] / batch.values[:, c["cycles"]]
    membw = batch.regime == REGIMES.index("membw")
    none = batch.regime == REGIMES.index("none")
    assert membw.any()
    assert none.any()
    assert np.median(bandwidth[membw]) > 3 * np.median(bandwidth[none])
    assert np.median(ipc[membw]) < np.median(ipc[none])


def test_held_out_kinds_never_appear() -> None:
    train, test = holdout_split(per_class=1, seed=4)
    assert not set(train) & set(test)
    assert {KINDS[k].workload_class for k in test} == set(WORKLOAD_CLASSES)
    sim = SyntheticCluster(nodes=20, seed=4, workloads=train, epoch_ticks=(2, 4))
    used = {k for batch in sim.run(30) for kinds in batch.corunners for k in kinds}
    assert used <= set(train)
    assert not used & set(test)


def test_infeasible_regimes_are_refused() -> None:
    with pytest.raises(ValueError, match="membw"):
        SyntheticCluster(nodes=2, workloads=list(KINDS_BY_CLASS["cpu_bound"]), regime_weights={"membw": 1.0})
    with pytest.raises(ValueError, match="unknown workload"):
        SyntheticCluster(nodes=2, workloads=["nope"])


def test_anomalies_are_labelled_and_visible() -> None:
    sim = SyntheticCluster(nodes=40, seed=7, anomaly_rate=0.05, anomaly_kinds=["hang"], missing_event_prob=0)
    task_clock: dict[int, list[tuple[bool, float]]] = {}
    for batch in sim.run(40):
        tc = batch.values[:, EVENTS.index("task-clock")]
        for i in range(len(batch)):
            task_clock.setdefault(i, []).append((bool(batch.anomaly[i] >= 0), float(tc[i])))
        assert {r["anomaly"] for r in batch.truth_records()} <= {None, "hang"}
    checked = 0
    for series in task_clock.values():
        normal = [v for hung, v in series if not hung]
        for hung, value in series:
            if hung and normal:
                assert value < 0.1 * float(np.median(normal))
                checked += 1
    assert checked > 10
    assert set(ANOMALY_KINDS) >= {"hang", "cpu_hog", "memory_leak", "counter_glitch", "thrashing"}


def test_nodestate_dicts_validate_and_missing_counters_carry_no_number() -> None:
    sim = SyntheticCluster(nodes=40, seed=8, missing_event_prob=0.5, multiplex_prob=0.5, anomaly_rate=0.02)
    batch = list(sim.run(3))[-1]
    states = batch.nodestate_dicts()
    assert len(states) == 40
    saw_missing = saw_mux = False
    for i, state in enumerate(states):
        model = NodeState.model_validate(state)
        assert model.source == "synthetic"
        for j, name in enumerate(EVENTS):
            counter = model.counters[name]
            if batch.status[i, j] == NOT_SUPPORTED:
                saw_missing = True
                assert counter.value is None
                assert counter.raw is None
                assert name not in model.supported_events
            elif counter.status == "multiplexed":
                saw_mux = True
                assert counter.running_ns < counter.enabled_ns
                assert counter.raw is not None
                assert counter.value == pytest.approx(
                    counter.raw * counter.enabled_ns / counter.running_ns, rel=1e-6, abs=1
                )
    assert saw_missing
    assert saw_mux
    assert "ground" not in str(states[0])
    assert "regime" not in states[0]


def test_fast_enough_vectorised() -> None:
    sim = SyntheticCluster(nodes=1000, seed=9)
    sim.tick()  # first epochs for every node
    started = time.process_time()
    samples = sum(len(batch) for batch in sim.run(20))
    rate = samples / max(time.process_time() - started, 1e-9)
    assert rate >= 50_000, f"{rate:,.0f} node-samples per CPU second"
