"""Panes folded together (``fold_panes``) and closed together (``observe_many``) give the same floats and
windows as one pane at a time: the features service folds every pane a batch closes or checkpoints in one
numpy pass per sample count (docs/performance.md, issue 19)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from featurelib.node.panes import PaneAgg, fold_panes, stack_features_many
from featurelib.node.samples import Sample
from featurelib.node.schema import N_FEATURES, PANES_60, PANES_300, M
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


# -- the window features of many stacks: the per-statistic form they were computed with before -------------


def _mean_then(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    return np.where(n > 0, s / np.maximum(n, 1.0), 0.0)


def _std_then(n: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    var = (q - s * s / np.maximum(n, 1.0)) / np.maximum(n - 1.0, 1.0)
    out: np.ndarray = np.sqrt(np.clip(var, 0.0, None))
    return out


def _stack_features_then(stacks: np.ndarray, last_samples: np.ndarray,
                         last_expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A frozen copy of ``stack_features_many`` as it was until 2026-11-27 (one call set per statistic)."""
    b, k = stacks.shape[0], stacks.shape[1]
    n10, s10 = stacks[:, -1, 0], stacks[:, -1, 1]
    t60 = stacks[:, -PANES_60:].sum(axis=1)
    t300 = stacks.sum(axis=1)
    n60, s60, q60 = t60[:, 0], t60[:, 1], t60[:, 2]
    n300, s300, q300 = t300[:, 0], t300[:, 1], t300[:, 2]
    m10, m60, m300 = _mean_then(n10, s10), _mean_then(n60, s60), _mean_then(n300, s300)
    sd60, sd300 = _std_then(n60, s60, q60), _std_then(n300, s300, q300)
    eps = 1e-6 + 0.01 * np.abs(m300)
    z = (m10 - m300) / np.maximum(sd300, eps)
    if k >= 2:
        nprev, sprev = stacks[:, -2, 0], stacks[:, -2, 1]
        delta = m10 - _mean_then(nprev, sprev)
        delta_ok = (n10 > 0) & (nprev > 0)
    else:
        delta, delta_ok = np.zeros((b, M)), np.zeros((b, M), dtype=bool)
    stats = np.stack([m10, m60, m300, sd60, z, delta], axis=2)
    ok = np.stack([n10 > 0, n60 > 0, n300 > 0, n60 >= 2, (n300 >= 3) & (n10 > 0), delta_ok], axis=2)
    frac = np.minimum(last_samples / np.maximum(last_expected, 1), 1.0)
    values = np.concatenate([np.where(ok, stats, 0.0).reshape(b, -1), frac.reshape(b, 1)], axis=1)
    valid = np.concatenate([ok.reshape(b, -1), np.ones((b, 1), dtype=bool)], axis=1)
    return values, valid


@np.errstate(all="ignore")
def test_stack_features_many_is_bit_identical_to_the_per_statistic_form() -> None:
    """Any batch size and window length, with NaN, ±inf, ±0.0, subnormals and huge sums in the panes."""
    rng = np.random.default_rng(19)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, 1e308])
    for _ in range(400):
        b, k = int(rng.integers(1, 40)), int(rng.choice([1, 2, 3, PANES_60, PANES_60 + 1, PANES_300]))
        stacks = rng.normal(size=(b, k, 3, M)) * rng.choice([1e-3, 1.0, 1e6, 1e300])
        stacks[:, :, 0] = rng.integers(0, 4, size=(b, k, M))  # counts, zeros included
        odd = rng.random(stacks.shape) < 0.05
        stacks[odd] = rng.choice(specials, size=int(odd.sum()))
        samples, expected = rng.integers(0, 12, size=b), rng.integers(0, 12, size=b)
        values, valid = stack_features_many(stacks, samples, expected)
        then_values, then_valid = _stack_features_then(stacks, samples, expected)
        assert values.shape == then_values.shape == (b, N_FEATURES) and values.dtype == then_values.dtype
        assert values.tobytes() == then_values.tobytes()
        assert valid.tobytes() == then_valid.tobytes()
