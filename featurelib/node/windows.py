"""The per-node window state machine: samples in, one :class:`Window` per closed pane out.

:class:`NodeWindows` is persisted to a small key-value store (a dict offline; a changelog
topic in the features service, written once per commit). It deduplicates samples, accepts
out-of-order samples until their pane closes, closes a pane on the sample that completes it
(``ts + interval`` reaches the pane end) or on the first sample of a later pane, and emits
one :class:`Window` per closed pane. Re-delivering a sample that closed one of the last
``REPLAY_PANES`` panes re-emits the identical window (idempotent replay after a crash
between producing and committing).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import orjson

from featurelib.node.panes import PANE_BODY, PANE_HEAD, PaneAgg, body_sums, fold_panes, stack_features_many
from featurelib.node.samples import Sample
from featurelib.node.schema import HOP_MS, PANES_300, M

REPLAY_PANES: Final = 6
"""Windows that can be re-emitted identically when their closing sample is delivered again."""
RING: Final = PANES_300 + REPLAY_PANES
"""Closed panes kept per node: a 300 s window plus the replay tolerance."""


class PaneStore(Protocol):
    """Where per-node state is persisted: a dict offline, a changelog topic online."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...


class DictStore:
    """In-memory PaneStore (training, tests)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value


@dataclass(frozen=True, slots=True)
class Window:
    """One emitted window: the FeatureVector payload before wire encoding."""

    node: str
    ts_ms: int
    """Window end (event time)."""
    pane: int
    values: list[float]
    valid: list[bool]
    samples: int
    input_ts_ms: int
    replay: bool = False
    """True when re-emitted for a re-delivered closing sample (identical to the original)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    """accepted | duplicate | late | replayed (| failed, from ``observe_many``)"""
    windows: tuple[Window, ...] = ()
    error: str | None = None


_BARE: Final = {status: Outcome(status) for status in ("accepted", "duplicate", "late", "replayed")}
"""Outcomes without windows or errors (frozen, so shared)."""


def pane_phase_ms(node: str, hop_ms: int = HOP_MS) -> int:
    """Per-node offset of pane boundaries: spreads window closes of many nodes over the hop."""
    return zlib.crc32(node.encode()) % hop_ms


def pane_key(node: str, index: int) -> str:
    return f"{node}|{index % RING}"


_META_INDEX, _META_SAMPLES, _META_INPUT, _META_EXPECTED = range(4)
_OPEN_MAGIC: Final = b"\x01"
"""First byte of a binary open-pane record (a JSON one starts with ``{``)."""
_OPEN_HEAD: Final = struct.Struct("<qqqqII")  # pane index, samples, newest input ts, expected, #ids, #emits
_SEQ_LIMIT: Final = 2**63
"""Sample ids are stored as signed 64-bit integers."""


@dataclass(slots=True)
class _NodeState:
    """One node's decoded state: the open pane and a ring of the last ``RING`` closed panes."""

    open: PaneAgg | None
    ids: list[list[int]]
    """(seq, ts_ms) of the samples in the open pane (dedup)."""
    emits: list[list[int]]
    """(pane, seq, ts_ms) of the samples that closed the last ``REPLAY_PANES`` panes."""
    ring: np.ndarray
    """(RING, 3, M) float64: counts, sums, sums of squares of closed pane ``i`` at row ``i % RING``."""
    meta: np.ndarray
    """(RING, 4) int64: pane index (-1 = empty), samples, newest input ts, expected samples."""


@dataclass(frozen=True, slots=True)
class _Pending:
    """A closed window whose features are not computed yet (its panes are copied)."""

    node: str
    index: int
    stack: np.ndarray
    samples: int
    input_ts_ms: int
    expected: int


@dataclass(slots=True)
class _Closing:
    """A pane closed inside ``observe_many``: its sums are folded with the batch's other closed panes,
    then written to the ring and its window gathered (``pending``), or ``error`` says why not."""

    node: str
    st: _NodeState
    agg: PaneAgg
    pending: _Pending | None = None
    error: str | None = None


class NodeWindows:
    """Per-node pane aggregation with dedup, bounded lateness and idempotent re-emission.

    State lives decoded in memory (one ``_NodeState`` per node) and is persisted as records
    in ``store``: key ``node`` holds the open pane (packed binary; the older JSON layout is
    still read: aggregates, the (seq, ts) ids it contains, the closing ids of the last
    ``REPLAY_PANES`` windows); keys ``node|i`` hold
    closed panes (packed binary), a ring of ``RING``. A node seen for the first time is
    loaded from ``store`` (what a changelog restored).

    ``write_through=True`` (offline) writes the records on every ``observe``;
    ``write_through=False`` (the features service) only marks them dirty, and
    :meth:`checkpoint` / :meth:`write_nodes` hand the dirty records to a writer — once per
    offset commit instead of once per sample. Either way a closed pane is written before its
    node's open-pane record, so any prefix of the writes (what a changelog restores after a
    crash) is a consistent state.
    """

    def __init__(self, store: PaneStore, *, hop_ms: int = HOP_MS, spread: bool = True,
                 write_through: bool = True) -> None:
        if hop_ms != HOP_MS:
            raise ValueError(f"hop_ms is part of the feature schema ({HOP_MS}); got {hop_ms}")
        self.store = store
        self.hop_ms = hop_ms
        self.spread = spread
        self.write_through = write_through
        self._phase: dict[str, int] = {}
        self._nodes: dict[str, _NodeState] = {}
        self._dirty: dict[str, list[int]] = {}
        """Nodes changed since they were last written, with the ring slots of panes they closed."""
        self._closing: list[_Closing] | None = None
        """Panes closed in the ``observe_many`` under way whose sums are not folded yet (None: fold at once)."""
        self._closing_nodes: set[str] = set()

    def phase(self, node: str) -> int:
        p = self._phase.get(node)
        if p is None:
            p = self._phase[node] = pane_phase_ms(node, self.hop_ms) if self.spread else 0
        return p

    def pane_of(self, node: str, ts_ms: int) -> int:
        return (ts_ms - self.phase(node)) // self.hop_ms

    def pane_end(self, node: str, index: int) -> int:
        return (index + 1) * self.hop_ms + self.phase(node)

    # -- state (de)serialisation ------------------------------------------------------------
    def _state(self, node: str) -> _NodeState:
        st = self._nodes.get(node)
        if st is None:
            st = self._nodes[node] = self._load(node)
        return st

    def _load(self, node: str) -> _NodeState:
        ring = np.zeros((RING, 3, M))
        meta = np.zeros((RING, 4), dtype=np.int64)
        meta[:, _META_INDEX] = -1
        for slot in range(RING):
            raw = self.store.get(f"{node}|{slot}")
            if raw is not None:
                pane = PaneAgg.from_bytes(raw)
                if pane.index % RING == slot:
                    ring[slot] = pane.sums()
                    meta[slot] = (pane.index, pane.samples, pane.input_ts_ms, pane.expected)
        raw = self.store.get(node)
        if raw is None:
            return _NodeState(None, [], [], ring, meta)
        if raw[:1] == _OPEN_MAGIC:
            index, samples, input_ts, expected, n_ids, n_emits = _OPEN_HEAD.unpack_from(raw, 1)
            sums = body_sums(raw, 1 + _OPEN_HEAD.size)
            tail = struct.unpack_from(f"<{2 * n_ids + 3 * n_emits}q", raw, 1 + _OPEN_HEAD.size + PANE_BODY.size)
            agg = PaneAgg.of_sums(index, sums, samples, input_ts, expected)
            ids = [list(tail[i:i + 2]) for i in range(0, 2 * n_ids, 2)]
            emits = [list(tail[i:i + 3]) for i in range(2 * n_ids, 2 * n_ids + 3 * n_emits, 3)]
            return _NodeState(agg, ids, emits, ring, meta)
        state: dict[str, Any] = orjson.loads(raw)  # the JSON layout written before the binary one
        agg = PaneAgg(state["p"], state["n"], state["s"], state["q"], state["cnt"], state["in"], state["exp"])
        return _NodeState(agg, state["ids"], state["emits"], ring, meta)

    @staticmethod
    def _open_record(st: _NodeState) -> bytes:
        """Binary (struct) open-pane record: ~5x cheaper than JSON, written per node per commit."""
        agg = st.open
        assert agg is not None
        flat = [x for pair in st.ids for x in pair] + [x for triple in st.emits for x in triple]
        return b"".join((
            _OPEN_MAGIC,
            _OPEN_HEAD.pack(agg.index, agg.samples, agg.input_ts_ms, agg.expected, len(st.ids), len(st.emits)),
            agg.body(),
            struct.pack(f"<{len(flat)}q", *flat),
        ))

    @staticmethod
    def _pane_record(st: _NodeState, slot: int) -> bytes:
        # the bytes PANE_BODY.pack(*floats) gives (little-endian doubles, bit for bit), without 78 Python floats
        return PANE_HEAD.pack(*st.meta[slot].tolist()) + np.ascontiguousarray(st.ring[slot], dtype="<f8").tobytes()

    def closed_pane(self, node: str, index: int) -> PaneAgg | None:
        st = self._state(node)
        slot = index % RING
        if int(st.meta[slot, _META_INDEX]) != index:
            return None
        row = st.ring[slot]
        _, samples, input_ts, expected = st.meta[slot].tolist()
        return PaneAgg.of_sums(index, row.copy(), samples, input_ts, expected)

    def _gather(self, node: str, index: int) -> _Pending | None:
        """The panes of the window ending at closed pane ``index``, copied out of the ring."""
        st = self._state(node)
        slot = index % RING
        if int(st.meta[slot, _META_INDEX]) != index or int(st.meta[slot, _META_SAMPLES]) == 0:
            return None
        wanted = np.arange(index - PANES_300 + 1, index + 1)
        slots = wanted % RING
        present = st.meta[slots, _META_INDEX] == wanted
        stack = np.where(present[:, None, None], st.ring[slots], 0.0)
        _, samples, input_ts, expected = st.meta[slot].tolist()
        return _Pending(node, index, stack, samples, input_ts, expected)

    def _finish(self, pending: Sequence[_Pending]) -> list[Window]:
        """Compute the features of ``pending`` windows in one pass."""
        if not pending:
            return []
        values, valid = stack_features_many(
            np.stack([p.stack for p in pending]),
            np.array([p.samples for p in pending]),
            np.array([p.expected for p in pending]),
        )
        return [
            Window(p.node, self.pane_end(p.node, p.index), p.index, v, ok, p.samples, p.input_ts_ms)
            for p, v, ok in zip(pending, values.tolist(), valid.tolist(), strict=True)
        ]

    def window(self, node: str, index: int) -> Window | None:
        """Recompute the window ending at closed pane ``index`` from the ring."""
        pending = self._gather(node, index)
        return None if pending is None else self._finish([pending])[0]

    # -- the transition ---------------------------------------------------------------------
    def observe(self, sample: Sample) -> Outcome:
        status, pending = self._observe(sample)
        return Outcome(status, tuple(self._finish([p for p in pending if isinstance(p, _Pending)])))

    def observe_many(self, samples: Sequence[Sample]) -> list[Outcome]:
        """``observe`` each sample in order; the windows they close are computed in one pass.

        A sample the state machine cannot handle gets status ``failed`` with the error, and
        the others go on (the service dead-letters it).
        """
        found: list[tuple[str, list[_Pending | _Closing]]] = []
        errors: dict[int, str] = {}
        if not self.write_through:  # the panes this batch closes are folded together (_settle)
            self._closing = []
        try:
            for i, sample in enumerate(samples):
                try:
                    found.append(self._observe(sample))
                except Exception as exc:  # reported per sample; the batch goes on
                    errors[i] = f"{type(exc).__name__}: {exc}"
                    found.append(("failed", []))
        finally:
            self._settle()
            self._closing = None
        steps: list[tuple[str, list[_Pending]]] = []
        for i, (status, items) in enumerate(found):
            pending: list[_Pending] = []
            for item in items:
                if isinstance(item, _Pending):
                    pending.append(item)
                elif item.pending is not None:
                    pending.append(item.pending)
                else:  # its pane could not be folded: the sample fails, as when it closed the pane at once
                    errors[i] = item.error or "pane not folded"
            if i in errors and status != "failed":
                status, pending = "failed", []
            steps.append((status, pending))
        windows = iter(self._finish([p for _, pending in steps for p in pending]))
        out: list[Outcome] = []
        for i, (status, pending) in enumerate(steps):
            if pending:
                out.append(Outcome(status, tuple(next(windows) for _ in pending)))
            elif i in errors:
                out.append(Outcome(status, (), errors[i]))
            else:
                out.append(_BARE[status])
        return out

    def _observe(self, sample: Sample) -> tuple[str, list[_Pending | _Closing]]:
        node = sample.node
        if not 0 <= sample.seq < _SEQ_LIMIT:
            raise ValueError(f"seq {sample.seq} is outside the 64-bit range the window state stores")
        if node in self._closing_nodes:  # its ring is read below (a replay, the next window): fold first
            self._settle()
        st = self._state(node)
        ident = [sample.seq, sample.ts_ms]
        hop = self.hop_ms
        phase = self._phase.get(node)
        if phase is None:
            phase = self.phase(node)
        index = (sample.ts_ms - phase) // hop  # pane_of, with the phase looked up once for both
        agg = st.open
        if agg is not None:
            for pane, seq, ts in st.emits:
                if seq == sample.seq and ts == sample.ts_ms:
                    # a sample that closed a recent pane, delivered again (replay after a crash):
                    # re-emit the identical window so an output lost with the crash is restored.
                    again = self._gather(node, pane)
                    return "replayed", [again] if again is not None else []
            if ident in st.ids:
                return "duplicate", []
            if index < agg.index:
                return "late", []
        windows: list[_Pending | _Closing] = []
        if agg is None:
            agg, st.ids, st.emits = PaneAgg(index), [], []
        elif index > agg.index:
            if agg.samples > 0:
                windows.append(self._close(node, st, agg))
                st.emits.append([agg.index, sample.seq, sample.ts_ms])
            agg, st.ids = PaneAgg(index), []
        agg.expected = max(1, hop // max(sample.interval_ms, 1))
        agg.add(sample.metrics, sample.input_ts_ms)
        st.ids.append(ident)
        if (sample.ts_ms + sample.interval_ms - phase) // hop > index:
            windows.append(self._close(node, st, agg))
            st.emits.append([agg.index, sample.seq, sample.ts_ms])
            agg, st.ids = PaneAgg(index + 1), []
        st.open = agg
        if len(st.emits) > REPLAY_PANES:
            del st.emits[:-REPLAY_PANES]
        if self.write_through:
            self.store.put(node, self._open_record(st))
        elif node not in self._dirty:
            self._dirty[node] = []
        return "accepted", windows

    def _close(self, node: str, st: _NodeState, agg: PaneAgg) -> _Pending | _Closing:
        slot = agg.index % RING
        if self._closing is not None:
            st.meta[slot] = (agg.index, agg.samples, agg.input_ts_ms, agg.expected)
            self._dirty.setdefault(node, []).append(slot)
            closing = _Closing(node, st, agg)
            self._closing.append(closing)
            self._closing_nodes.add(node)
            return closing
        st.ring[slot] = agg.sums()
        st.meta[slot] = (agg.index, agg.samples, agg.input_ts_ms, agg.expected)
        if self.write_through:
            self.store.put(pane_key(node, agg.index), self._pane_record(st, slot))
        else:
            self._dirty.setdefault(node, []).append(slot)
        pending = self._gather(node, agg.index)
        assert pending is not None  # agg has samples
        return pending

    def _settle(self) -> None:
        """Fold the panes closed so far in one pass, write them to their ring slots and gather their windows."""
        closing = self._closing
        if not closing:
            return
        self._closing = []
        self._closing_nodes.clear()
        try:
            fold_panes([c.agg for c in closing])
        except Exception:  # each pane's own fold below raises its error, for its sample
            pass
        for c in closing:
            slot = c.agg.index % RING
            try:
                c.st.ring[slot] = c.agg.sums()
            except Exception as exc:  # the pane stays empty; its sample is reported
                c.st.meta[slot, _META_INDEX] = -1
                c.error = f"{type(exc).__name__}: {exc}"
                continue
            c.pending = self._gather(c.node, c.agg.index)

    # -- persistence (write_through=False) ----------------------------------------------------
    @property
    def dirty(self) -> int:
        """Records a checkpoint would write now."""
        return sum(len(set(slots)) + 1 for slots in self._dirty.values())

    def dirty_nodes(self) -> list[str]:
        """The nodes changed since they were last written (a snapshot, for :meth:`write_nodes`)."""
        return list(self._dirty)

    def write_nodes(self, nodes: Sequence[str], write: Callable[[str, str, bytes], None]) -> int:
        """Hand the changed records of ``nodes`` to ``write(node, key, value)``; the number written.

        Per node, the panes it closed come before its open pane, so every prefix of what
        ``write`` persisted is a consistent state (an open pane never names a closed pane the
        store lacks). The records are the state *now*: a node written after more samples
        arrived is written newer, never older. Nodes no longer dirty (or forgotten) are
        skipped, so a caller may write a snapshot of :meth:`dirty_nodes` in slices while
        samples keep arriving.
        """
        count = 0
        dirty, states = self._dirty, self._nodes
        # the open panes' kept samples, folded together rather than one pane at a time in _open_record
        fold_panes([st.open for node in nodes if node in dirty and (st := states.get(node)) is not None
                    and st.open is not None])
        for node in nodes:
            slots = self._dirty.pop(node, None)
            st = self._nodes.get(node)
            if slots is None or st is None:
                continue
            for slot in dict.fromkeys(slots):
                write(node, f"{node}|{slot}", self._pane_record(st, slot))
            write(node, node, self._open_record(st))
            count += len(set(slots)) + 1
        return count

    def checkpoint(self, write: Callable[[str, str, bytes], None]) -> int:
        """Hand every record changed since the last checkpoint to ``write`` (see :meth:`write_nodes`)."""
        return self.write_nodes(self.dirty_nodes(), write)

    def forget(self, nodes: set[str]) -> None:
        """Drop the in-memory state of ``nodes`` (their partitions moved to another worker).

        Call :meth:`checkpoint` first: records of forgotten nodes that are still dirty are lost.
        """
        for node in nodes:
            self._nodes.pop(node, None)
            self._dirty.pop(node, None)

    def __len__(self) -> int:
        return len(self._nodes)


def features_for_stream(
    samples: Sequence[Sample], store: PaneStore | None = None, on_window: Callable[[Window], None] | None = None
) -> list[Window]:
    """Run the state machine over samples in order (training / tests); returns every window."""
    machine = NodeWindows(store if store is not None else DictStore())
    out: list[Window] = []
    for s in samples:
        for w in machine.observe(s).windows:
            out.append(w)
            if on_window is not None:
                on_window(w)
    return out
