"""resctrl readings in the pod-pressure stage: summed over a pod's window, put on the pressure scale by the node's
metrics, and used for llc / membw as services/pod_pressure/monitored.py says — by hand."""

from __future__ import annotations

import pytest

from featurelib.pod import (
    EXTENDED_EVENTS,
    LLC_OCCUPANCY,
    MBM_TOTAL_BYTES,
    NODE_LLC_BYTES,
    NODE_MEMBW_PEAK,
    PodWindow,
    PodWindows,
)
from services.node_agent.nodestate import counted, without_number
from services.pod_pressure.monitored import combine, reading

A = "kubepods/pod0f6c1a2b-1234-4abc-9def-0123456789ab"
B = "kubepods/pod1a2b3c4d-0000-4abc-9def-0123456789ab"
MIB = 2**20


def counter(value: float | None) -> dict[str, object]:
    return without_number("not_counted", enabled_ns=10**9) if value is None else counted(value, enabled_ns=10**9)


def test_a_window_holds_the_mean_occupancy_and_the_traffic_per_second_over_samples_with_a_number() -> None:
    windows = PodWindows(EXTENDED_EVENTS, window_s=4)
    base = {e: counter(100.0) for e in EXTENDED_EVENTS}
    samples = [  # (occupancy, bytes this interval) for A; B has no traffic number after its first sample
        ((1 * MIB, None), (2 * MIB, 10.0)),
        ((3 * MIB, 4e9), (2 * MIB, None)),
        ((3 * MIB, 6e9), (2 * MIB, None)),
        ((1 * MIB, 2e9), (2 * MIB, None)),
    ]
    done: list[PodWindow] = []
    for t, ((occ_a, mbm_a), (occ_b, mbm_b)) in enumerate(samples, start=1):
        cgroups = {
            A: {**base, LLC_OCCUPANCY: counter(occ_a), MBM_TOTAL_BYTES: counter(mbm_a)},
            B: {**base, LLC_OCCUPANCY: counter(occ_b), MBM_TOTAL_BYTES: counter(mbm_b)},
        }
        done = windows.observe("n1", t * 1000, 1000, cgroups)
    by_cgroup = {w.cgroup: w for w in done}
    assert by_cgroup[A].monitored == {LLC_OCCUPANCY: 2 * MIB, MBM_TOTAL_BYTES: pytest.approx(12e9 / 3)}
    # B's traffic covers a quarter of its window, under the half a reading needs
    assert by_cgroup[B].monitored == {LLC_OCCUPANCY: 2 * MIB}
    # counts are summed as before; a pod without readings has none
    assert by_cgroup[A].counts["cycles"] == 400.0 and not by_cgroup[A].missing
    plain = PodWindows(EXTENDED_EVENTS, window_s=1).observe("n2", 1000, 1000, {A: base})
    assert plain[0].monitored == {}


def window(cgroup: str, node: str = "n1", ts_ms: int = 10_000, **monitored: float) -> PodWindow:
    return PodWindow(node, cgroup, cgroup[-36:], ts_ms, 10_000, {}, (), ts_ms, dict(monitored))


SCALES = {"n1": {NODE_LLC_BYTES: 100.0, NODE_MEMBW_PEAK: 1000.0}}


def test_readings_are_the_share_of_the_nodes_resource_and_need_its_scale() -> None:
    w = window(A, llc_occupancy=25.0, mbm_total_bytes=2500.0)
    assert reading(w, LLC_OCCUPANCY, 100.0) == 0.25
    assert reading(w, MBM_TOTAL_BYTES, 1000.0) == 1.0  # clipped: the stated peak was low
    assert reading(w, LLC_OCCUPANCY, None) is None and reading(w, LLC_OCCUPANCY, 0.0) is None
    assert reading(window(A), LLC_OCCUPANCY, 100.0) is None


def test_calm_readings_replace_the_estimate_and_saturated_ones_only_raise_it() -> None:
    windows = [
        window(A, llc_occupancy=20.0, mbm_total_bytes=600.0),
        window(B, llc_occupancy=30.0, mbm_total_bytes=500.0),
    ]
    estimates = [(0.5, 0.4, 0.3, 0.2), (0.1, 0.7, 0.3, 0.2)]
    a, b = combine(windows, estimates, SCALES, saturated_at=0.9)
    # llc: 0.2 + 0.3 < 0.9, the readings are the pressures; membw: 0.6 + 0.5 >= 0.9, the larger of the two
    assert a.pressures == (0.2, 0.6, 0.3, 0.2) and b.pressures == (0.3, 0.7, 0.3, 0.2)
    assert a.sources == {"llc": "reading", "membw": "reading_or_model"} == b.sources


def test_without_readings_or_scales_the_model_answers_and_an_unanswered_pod_stays_unanswered() -> None:
    windows = [window(A, llc_occupancy=20.0), window(B, llc_occupancy=90.0), window(A, node="n2", llc_occupancy=5.0)]
    estimates = [(0.5, 0.4, 0.3, 0.2), None, (0.6, 0.1, 0.1, 0.1)]
    a, b, other = combine(windows, estimates, SCALES, saturated_at=0.9)
    # B's reading counts toward n1's sum (0.2 + 0.9: saturated) though it gets no record pressures
    assert a.pressures == (0.5, 0.4, 0.3, 0.2) and a.sources == {"llc": "reading_or_model", "membw": "model"}
    assert b.pressures is None and b.sources == {}
    # n2 sent no scales: its reading cannot be placed
    assert other.pressures == (0.6, 0.1, 0.1, 0.1) and other.sources == {"llc": "model", "membw": "model"}
    with pytest.raises(ValueError, match="2 windows but 1 estimates"):
        combine(windows[:2], estimates[:1], SCALES, saturated_at=0.9)


def test_each_node_window_is_judged_on_its_own_readings() -> None:
    """One batch can close a node's window twice (a backlog re-read): neither window's readings count in the other's
    sum."""
    windows = [window(A, llc_occupancy=50.0), window(A, ts_ms=20_000, llc_occupancy=50.0)]
    first, second = combine(windows, [(0.9, 0.1, 0.1, 0.1)] * 2, SCALES, saturated_at=0.9)
    assert first.pressures == second.pressures == (0.5, 0.1, 0.1, 0.1)
    assert first.sources["llc"] == "reading" == second.sources["llc"]
