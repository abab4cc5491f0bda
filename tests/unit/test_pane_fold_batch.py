"""Panes folded together (``fold_panes``) and closed together (``observe_many``) give the same floats and
windows as one pane at a time: the features service folds every pane a batch closes or checkpoints in one
numpy pass per sample count (docs/performance.md, issue 19)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from featurelib.node.panes import PaneAgg, fold_panes
from featurelib.node.samples import Sample
from featurelib.node.schema import M
from featurelib.node.windows import DictStore, NodeWindows, Window

_POOL: list[float | None] = [None, 0.0, -0.0, 1.0, -1.0, 1e308, -1e308, math.inf, -math.inf, 1e-320, 1e16, -1e16,
                             math.nan]


def _pair(rng: random.Random, index: int) -> tuple[PaneAgg, PaneAgg]:
    """Two panes fed the same samples (some onto sums read back from a record, as a restored pane)."""
    base: Any = (None, None, None)
    if rng.random() < 0.3:
        base = [[rng.choice([0.0, -0.0, 1e16, 1.0, math.nan]) for _ in range(M)] for _ in range(3)]
    one, other = PaneAgg(index, *base), PaneAgg(index, *base)
    for _ in range(rng.randint(0, 12)):
        row = tuple(rng.choice(_POOL) if rng.random() < 0.4 else rng.uniform(-1e17, 1e17) for _ in range(M))
        one.add(row, 1)
        other.add(list(row) if rng.random() < 0.5 else row, 1)
    return one, other


def test_fold_panes_gives_each_pane_its_own_folds_floats() -> None:
    """Bit for bit, including -0.0 sums, NaN, infinities and sums whose value depends on the order of adds."""
    rng = random.Random(11)
    for _ in range(120):
        pairs = [_pair(rng, i) for i in range(rng.randint(1, 30))]
        fold_panes([other for _, other in pairs])
        for one, other in pairs:
            assert other._pending == []
            assert other.sums().tobytes() == one.sums().tobytes()


def test_a_pane_that_cannot_fold_keeps_its_samples_and_says_why() -> None:
    good, bad = PaneAgg(1), PaneAgg(2)
    good.add([1.0] * M, 1)
    bad.add(["x"] * M, 1)  # type: ignore[list-item]  # nothing the features produce; a stack refuses it
    fold_panes([good, bad])
    assert good._pending == [] and good.sums()[1].tolist() == [1.0] * M
    assert len(bad._pending) == 1
    with pytest.raises(ValueError):
        bad.sums()


def _samples(nodes: int, ticks: int, rng: random.Random) -> list[Sample]:
    out = []
    for t in range(ticks):
        for n in range(nodes):
            metrics = tuple(None if rng.random() < 0.1 else rng.uniform(0.0, 50.0) for _ in range(M))
            ts = 1_795_000_000_000 + 1000 * t + rng.randint(0, 5)
            out.append(Sample(f"n{n}", t, ts, 1000, ts, metrics))
    return out


def _windows(outcomes: list[Any]) -> list[tuple[Any, ...]]:
    return [(o.status, o.error, tuple((w.node, w.ts_ms, w.values, w.valid, w.replay) for w in o.windows))
            for o in outcomes]


def test_a_batch_that_closes_several_panes_of_a_node_and_replays_gives_the_one_by_one_answers() -> None:
    """A node closing two panes, and a closing sample delivered again, inside one batch (the ring is read
    between the closes): outcomes and windows as ``observe`` one sample at a time, and the same records."""
    rng = random.Random(5)
    samples = _samples(nodes=4, ticks=45, rng=rng)
    probe = NodeWindows(DictStore())
    closing = [s for s in samples[:160] if probe.observe(s).windows][-6:]  # recent enough to be replayed
    feed = samples[:160] + closing[:3] + samples[160:] + closing[3:]
    one, many = NodeWindows(DictStore()), NodeWindows(DictStore(), write_through=False)
    expected = [one.observe(s) for s in feed]
    got = []
    for start in range(0, len(feed), 64):  # 64 samples of 4 nodes: each closes up to two panes per batch
        got += many.observe_many(feed[start:start + 64])
    assert _windows(got) == _windows(expected)
    assert any(o.status == "replayed" and o.windows for o in got)
    records = DictStore()
    many.checkpoint(lambda _node, key, value: records.put(key, value))
    assert records.data == one.store.data  # type: ignore[attr-defined]


def test_a_pane_that_cannot_fold_fails_its_closing_sample_alone() -> None:
    rng = random.Random(2)
    good = _samples(nodes=1, ticks=12, rng=rng)
    bad = [Sample("bad", s.seq, s.ts_ms, s.interval_ms, s.input_ts_ms, ("x",) * M)  # type: ignore[arg-type]
           for s in good]
    machine = NodeWindows(DictStore(), write_through=False)
    outcomes = machine.observe_many([x for pair in zip(good, bad, strict=True) for x in pair])
    failed = [o for o in outcomes if o.status == "failed"]
    assert failed and all("ValueError" in (o.error or "") for o in failed)
    windows: list[Window] = [w for o in outcomes for w in o.windows]
    assert windows and {w.node for w in windows} == {"n0"}
