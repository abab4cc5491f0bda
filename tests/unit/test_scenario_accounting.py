"""Soak loss accounting against the real windowing state machine (featurelib), no broker."""

from __future__ import annotations

from dataclasses import replace

from featurelib.node.samples import Sample
from featurelib.node.windows import DictStore, NodeWindows
from loadtests.accounting import FLUSH_PHASE, Tick, account, account_stage, dedupe_windows, read_ticks
from loadtests.load_plan import node_name
from loadtests.observe import FeatureWindow

T0 = 1_800_000_000_000
METRICS = (None,) * 26


def ticks(n_ticks: int, nodes: int, flush_ticks: int = 12) -> list[Tick]:
    out = [Tick(k, T0 + k * 1000, nodes, "soak") for k in range(n_ticks)]
    out += [Tick(n_ticks + k, T0 + (n_ticks + k) * 1000, nodes, FLUSH_PHASE) for k in range(flush_ticks)]
    return out


def windows_from(ticks_: list[Tick], drop: set[tuple[str, int]] = frozenset()) -> list[FeatureWindow]:  # type: ignore[assignment]
    """What the features service emits for these ticks (samples in `drop` never reach it)."""
    machine = NodeWindows(DictStore())
    out = []
    for tick in ticks_:
        for i in range(tick.nodes):
            node = node_name(i)
            if (node, tick.seq) in drop:
                continue
            sample = Sample(node, tick.seq, tick.ts_ms, 1000, tick.ts_ms + 5, METRICS)
            for w in machine.observe(sample).windows:
                out.append(FeatureWindow(w.node, w.ts_ms, 10, w.samples))
    return out


def test_every_sample_accounted_when_nothing_is_lost() -> None:
    t = ticks(95, 20)
    result = account(t, windows_from(t), dead=[])
    assert result.produced == 95 * 20
    assert result.flush_samples == 12 * 20
    assert result.lost == 0
    assert result.unexpected == 0
    assert result.windows >= 20 * 9


def test_a_dropped_sample_is_lost_in_its_window() -> None:
    t = ticks(60, 5)
    result = account(t, windows_from(t, drop={("sim-00003", 17)}), dead=[])
    assert result.lost == 1
    assert result.short == 1
    assert result.lost_by_node == {"sim-00003": 1}


def test_a_dead_lettered_sample_is_accounted() -> None:
    t = ticks(60, 5)
    dropped = {("sim-00001", 30), ("sim-00004", 2)}
    result = account(t, windows_from(t, drop=dropped), dead=dropped)
    assert result.lost == 0
    assert result.dead_lettered == 2


def test_a_missing_window_makes_its_samples_uncovered() -> None:
    t = ticks(60, 3)
    windows = windows_from(t)
    victim = next(w for w in windows if w.node == "sim-00002" and w.samples == 10)
    result = account(t, [w for w in windows if w != victim], dead=[])
    assert result.uncovered == 10
    assert result.lost == 10


def test_tail_without_flush_is_lost_but_unclosed_flush_samples_are_not() -> None:
    t = ticks(60, 2, flush_ticks=0)
    result = account(t, windows_from(t), dead=[])
    assert result.lost > 0  # the last open window of each node never closed
    t2 = ticks(60, 2)
    assert account(t2, windows_from(t2), dead=[]).lost == 0


def test_re_emitted_windows_count_once_and_overcount_is_unexpected() -> None:
    t = ticks(40, 2)
    windows = windows_from(t)
    again = windows + windows[:5]
    assert account(t, again, dead=[]).lost == 0
    assert len(dedupe_windows(again)["sim-00000"]) == len(dedupe_windows(windows)["sim-00000"])
    inflated = [replace(w, samples=w.samples + 1) if i == 0 else w for i, w in enumerate(windows)]
    result = account(t, inflated, dead=[])
    assert result.unexpected == 1
    assert result.lost == 0


def test_nodes_joining_later_are_accounted_from_their_first_tick() -> None:
    t = [Tick(k, T0 + k * 1000, 2 if k < 30 else 6, "soak") for k in range(70)]
    t += [Tick(70 + k, T0 + (70 + k) * 1000, 6, FLUSH_PHASE) for k in range(12)]
    result = account(t, windows_from(t), dead=[])
    assert result.produced == 30 * 2 + 40 * 6
    assert result.lost == 0


def test_read_ticks_parses_the_driver_log() -> None:
    lines = [b'{"seq":0,"ts_ms":5,"nodes":3,"phase":"soak"}\n', b"\n", b'{"seq":1,"ts_ms":6,"nodes":3,"phase":"flush"}']
    assert read_ticks(lines) == [Tick(0, 5, 3, "soak"), Tick(1, 6, 3, "flush")]
    assert read_ticks(lines)[1].flush


def test_stage_accounting_every_window_answered_or_dead_lettered() -> None:
    windows = [FeatureWindow("a", 10_000, 10, 10), FeatureWindow("a", 20_000, 10, 10),
               FeatureWindow("b", 10_000, 10, 10), FeatureWindow("b", 10_000, 10, 10)]
    full = account_stage("regime", windows, {("a", 10_000), ("a", 20_000), ("b", 10_000)}, set())
    assert (full.expected, full.answered, full.missing, full.unexpected) == (3, 3, 0, 0)
    partial = account_stage("anomaly", windows, {("a", 10_000), ("zz", 1)}, {("b", 10_000)})
    assert (partial.answered, partial.dead_lettered, partial.missing, partial.unexpected) == (1, 1, 1, 1)
