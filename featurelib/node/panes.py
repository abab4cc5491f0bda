"""Pane arithmetic: count / sum / sum of squares per metric over one pane, and window features.

:class:`PaneAgg` keeps the aggregates of one *pane* (``HOP_MS`` of event time). Hopping
windows of 10 s, 60 s and 300 s that advance by one pane are unions of the last 1, 6 and 30
panes (:func:`window_features`, :func:`stack_features_many`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import numpy as np

from featurelib.node.schema import PANES_60, PANES_300, M

PANE_HEAD: Final = struct.Struct("<qqqq")  # pane index, samples, newest input ts, expected samples
PANE_BODY: Final = struct.Struct("<" + "d" * (3 * M))


class PaneAgg:
    """Count, sum and sum of squares per metric over one pane.

    ``add`` only keeps the sample's metrics; they are folded into the sums with numpy when
    the sums are read (the pane closes, or a checkpoint writes it). Adding 26 metrics one by
    one into three lists of Python floats cost ~2 µs per sample in a loop over one pane, but
    ~14 µs per NodeState in the features service at 10,000/s (py-spy): 5,000 nodes' lists
    and floats do not stay in the CPU caches between a node's samples. The fold adds the
    samples in their order onto the sums so far, as the loop did, so the sums are the same
    floats (``tests/unit/test_node_features_fast.py`` compares bits with the loop).
    """

    __slots__ = ("_pending", "_sums", "expected", "index", "input_ts_ms", "samples")

    def __init__(self, index: int, n: Sequence[float] | None = None, s: Sequence[float] | None = None,
                 q: Sequence[float] | None = None, samples: int = 0, input_ts_ms: int = 0, expected: int = 1) -> None:
        self.index = index
        self._sums: np.ndarray | None = None if n is None and s is None and q is None else np.array(
            [_ZEROS if v is None else v for v in (n, s, q)], dtype=np.float64)
        self._pending: list[Sequence[float | None]] = []
        self.samples = samples
        self.input_ts_ms = input_ts_ms
        self.expected = expected

    @classmethod
    def of_sums(cls, index: int, sums: np.ndarray, samples: int, input_ts_ms: int, expected: int) -> PaneAgg:
        """A pane whose (3, M) counts, sums and sums of squares are ``sums`` (taken as they are, not copied)."""
        agg = cls(index, samples=samples, input_ts_ms=input_ts_ms, expected=expected)
        agg._sums = sums
        return agg

    def add(self, metrics: Sequence[float | None], input_ts_ms: int) -> None:
        """Count the sample ``metrics`` (M floats or None, kept as given until the next fold: a tuple, or a list
        nobody changes)."""
        if len(metrics) != M:  # here, not in a later fold, so the error is this sample's
            raise ValueError(f"a sample has {M} metrics, not {len(metrics)}")
        self._pending.append(metrics)
        self.samples += 1
        if input_ts_ms > self.input_ts_ms:
            self.input_ts_ms = input_ts_ms

    def sums(self) -> np.ndarray:
        """(3, M): counts, sums, sums of squares (the pane's own array: do not modify it)."""
        pending = self._pending
        if pending:
            self._sums = _fold(self._sums, pending)
            self._pending = []
        elif self._sums is None:
            self._sums = np.zeros((3, M))
        return self._sums

    @property
    def n(self) -> list[float]:
        out: list[float] = self.sums()[0].tolist()
        return out

    @property
    def s(self) -> list[float]:
        out: list[float] = self.sums()[1].tolist()
        return out

    @property
    def q(self) -> list[float]:
        out: list[float] = self.sums()[2].tolist()
        return out

    def body(self) -> bytes:
        """The sums as ``PANE_BODY`` packs them: counts, sums, sums of squares, little-endian doubles."""
        return np.ascontiguousarray(self.sums(), dtype="<f8").tobytes()

    def to_bytes(self) -> bytes:
        return PANE_HEAD.pack(self.index, self.samples, self.input_ts_ms, self.expected) + self.body()

    @classmethod
    def from_bytes(cls, data: bytes) -> PaneAgg:
        index, samples, input_ts, expected = PANE_HEAD.unpack_from(data)
        return cls.of_sums(index, body_sums(data, PANE_HEAD.size), samples, input_ts, expected)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PaneAgg):
            return NotImplemented
        return ((self.index, self.samples, self.input_ts_ms, self.expected)
                == (other.index, other.samples, other.input_ts_ms, other.expected)
                and self.sums().tobytes() == other.sums().tobytes())

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __repr__(self) -> str:
        return (f"PaneAgg(index={self.index}, samples={self.samples}, input_ts_ms={self.input_ts_ms}, "
                f"expected={self.expected}, sums={self.sums().tolist()})")


_ZEROS: Final = (0.0,) * M
_ZERO_SUMS: Final = np.zeros((3, M))


def body_sums(data: bytes, offset: int) -> np.ndarray:
    """The (3, M) sums packed at ``offset`` (``PANE_BODY``), as a new writable array."""
    return np.frombuffer(data, dtype="<f8", count=3 * M, offset=offset).astype(np.float64).reshape(3, M)


@np.errstate(all="ignore")  # inf - inf and overflow make NaN and inf silently, as Python's floats do
def _fold(sums: np.ndarray | None, pending: Sequence[Sequence[float | None]]) -> np.ndarray:
    """``sums`` (None: zeros) with the samples ``pending`` added one after the other; a None metric is not counted.

    The reduction runs over the samples axis, which is not the contiguous one, so numpy adds
    row after row in order (no pairwise summation): the loop's floats exactly.
    """
    x = np.array(pending, dtype=np.float64)  # None becomes NaN
    missing = np.isnan(x)
    if sum(row.count(None) for row in pending) != np.count_nonzero(missing):
        # a metric that is NaN itself: counted (and its sums NaN), as the loop counted it
        missing = np.array([[v is None for v in row] for row in pending], dtype=bool)
    k = len(pending)
    stack = np.empty((3, k + 1, M))
    if sums is None:
        stack[:, 0] = 0.0
    else:
        stack[:, 0] = sums
    np.logical_not(missing, out=stack[0, 1:], casting="unsafe")
    np.copyto(stack[1, 1:], np.where(missing, 0.0, x))
    np.multiply(stack[1, 1:], stack[1, 1:], out=stack[2, 1:])
    out: np.ndarray = stack.sum(axis=1)
    return out


def fold_panes(panes: Sequence[PaneAgg]) -> None:
    """Fold the samples every pane in ``panes`` kept into its sums: one numpy pass per sample count.

    Each pane gets the floats its own fold gives (``PaneAgg.sums``): panes with the same number of
    kept samples are stacked, and each adds its samples in their order onto its sums so far. The
    features service closes and checkpoints hundreds of panes per batch, and a fold's dozen numpy
    calls cost more than its arithmetic (docs/performance.md). What a stack cannot convert is
    folded pane by pane; a pane that cannot fold keeps its samples (its ``sums()`` raises why).
    """
    groups: dict[int, list[PaneAgg]] = {}
    for pane in panes:
        if pane._pending:
            groups.setdefault(len(pane._pending), []).append(pane)
    for k, group in groups.items():
        try:
            if len(group) == 1:
                group[0].sums()
                continue
            folded = _fold_many([p._sums for p in group], [row for p in group for row in p._pending], k)
        except (TypeError, ValueError):
            for pane in group:
                try:
                    pane.sums()
                except (TypeError, ValueError):
                    pass  # left kept: its own sums() raises the error where it is read
            continue
        for pane, sums in zip(group, folded, strict=True):
            pane._sums = sums
            pane._pending = []


@np.errstate(all="ignore")  # as _fold
def _fold_many(bases: Sequence[np.ndarray | None], rows: Sequence[Sequence[float | None]], k: int) -> np.ndarray:
    """(B, 3, M): ``_fold(bases[b], rows[b * k:(b + 1) * k])`` for every pane b, in one pass."""
    b = len(bases)
    x = np.array(rows, dtype=np.float64).reshape(b, k, M)  # None becomes NaN; a ragged row raises
    missing = np.isnan(x)
    if sum(row.count(None) for row in rows) != np.count_nonzero(missing):
        missing = np.array([[v is None for v in row] for row in rows], dtype=bool).reshape(b, k, M)
    stack = np.empty((3, b, k + 1, M))
    if any(base is not None for base in bases):
        stack[:, :, 0] = np.stack([_ZERO_SUMS if base is None else base for base in bases], axis=1)
    else:
        stack[:, :, 0] = 0.0
    np.logical_not(missing, out=stack[0, :, 1:], casting="unsafe")
    np.copyto(stack[1, :, 1:], np.where(missing, 0.0, x))
    np.multiply(stack[1, :, 1:], stack[1, :, 1:], out=stack[2, :, 1:])
    # the sum runs over an axis that is not the contiguous one: row after row, in order, as _fold's
    out: np.ndarray = np.ascontiguousarray(stack.sum(axis=2).transpose(1, 0, 2))
    return out


def window_features(panes: Sequence[PaneAgg | None]) -> tuple[list[float], list[bool]]:
    """Features of the window ending at ``panes[-1]`` (``panes`` oldest..newest, up to 30).

    Invalid features are 0.0 with ``valid`` False (the wire contract forbids NaN).
    """
    last = panes[-1]
    if last is None:
        raise ValueError("the newest pane of a window must exist")
    panes = list(panes[-PANES_300:])
    stack = np.zeros((len(panes), 3, M))
    for i, p in enumerate(panes):
        if p is not None:
            stack[i] = p.sums()
    return stack_features(stack, last.samples, last.expected)


def stack_features(stack: np.ndarray, last_samples: int, last_expected: int) -> tuple[list[float], list[bool]]:
    """Features from pane aggregates ``stack`` (k, 3, M), oldest..newest, missing panes all zero."""
    values, valid = stack_features_many(stack[None], np.array([last_samples]), np.array([last_expected]))
    return values[0].tolist(), valid[0].tolist()


def stack_features_many(
    stacks: np.ndarray, last_samples: np.ndarray, last_expected: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Features of B windows at once: ``stacks`` (B, k, 3, M) → values (B, N_FEATURES), valid.

    One numpy pass for every window closed in a batch of input: numpy's per-call cost
    dominates on (k, 3, M) arrays, so the per-window cost falls with B. Element-wise the
    arithmetic (and the sequential sum over panes) is the same for any B. The means of the
    10 s pane, the 60 s and 300 s totals and the pane before are taken in one call (and the
    two deviations in one): ~20 numpy calls instead of ~40, the same floats
    (``tests/unit/test_pane_fold_batch.py`` compares bits with the per-statistic form). In
    live operation a features batch closes a few windows, so this fixed cost is most of it.
    """
    b, k = stacks.shape[0], stacks.shape[1]
    # rows: the last pane (10 s), the 60 s and 300 s totals, the pane before the last (zeros: none)
    t = np.empty((4, b, 3, M))
    t[0] = stacks[:, -1]
    stacks[:, -PANES_60:].sum(axis=1, out=t[1])
    stacks.sum(axis=1, out=t[2])
    t[3] = stacks[:, -2] if k >= 2 else 0.0
    n, s = t[:, :, 0], t[:, :, 1]
    seen = n > 0
    mean = np.where(seen, s / np.maximum(n, 1.0), 0.0)  # m10, m60, m300, the pane before
    n_, s_, q_ = n[1:3], s[1:3], t[1:3, :, 2]
    sd = np.sqrt(np.clip((q_ - s_ * s_ / np.maximum(n_, 1.0)) / np.maximum(n_ - 1.0, 1.0), 0.0, None))  # 60, 300
    m10, m300 = mean[0], mean[2]
    stats = np.empty((6, b, M))  # mean_10s, mean_60s, mean_300s, std_60s, z_300s, delta_10s
    ok = np.empty((6, b, M), dtype=bool)
    stats[:3] = mean[:3]
    ok[:3] = seen[:3]
    stats[3] = sd[0]
    np.greater_equal(n[1], 2, out=ok[3])
    np.divide(m10 - m300, np.maximum(sd[1], 1e-6 + 0.01 * np.abs(m300)), out=stats[4])
    np.logical_and(n[2] >= 3, seen[0], out=ok[4])
    if k >= 2:
        np.subtract(m10, mean[3], out=stats[5])
        np.logical_and(seen[0], seen[3], out=ok[5])
    else:
        stats[5] = 0.0
        ok[5] = False
    values = np.empty((b, 6 * M + 1))
    valid = np.ones((b, 6 * M + 1), dtype=bool)
    # feature order: metric-major, then the six statistics (schema.NODE_FEATURE_NAMES), then samples_frac_10s
    values[:, :-1].reshape(b, M, 6)[...] = np.where(ok, stats, 0.0).transpose(1, 2, 0)
    valid[:, :-1].reshape(b, M, 6)[...] = ok.transpose(1, 2, 0)
    values[:, -1] = np.minimum(last_samples / np.maximum(last_expected, 1), 1.0)
    return values, valid
