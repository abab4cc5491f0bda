"""The concept-drift tracker's state in a changelog (``<group>-concept-changelog``), restored after a restart.

Keys: ``slot:<n>`` (the timelines of the tasks hashed to slot n, ``concept.SLOTS`` of them),
``bucket:<n>`` (matured pairs of one minute, cyclic over the window) and ``meta`` (model version
and task-event watermark). The key space is bounded, so the compacted topic needs no tombstones.
Everything goes to changelog partition 0: the stage runs as one replica that owns every input
partition (docs/drift.md), and the tracker's state is not partitioned the way its inputs are.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import orjson

from services.drift.concept import BUCKET_MS, ConceptConfig, ConceptReference, ConceptTracker
from services.runtime.batch_stream import ChangelogState
from services.runtime.stream_io import Sink

log = logging.getLogger(__name__)
PARTITION = 0


class ConceptState:
    """StateHooks for the tracker: restore rebuilds it, ``persist`` queues what changed in a batch."""

    def __init__(self, *, bootstrap: str, topic: str, sink: Sink, replication: int, config: ConceptConfig) -> None:
        self.table = ChangelogState(bootstrap=bootstrap, topic=topic, sink=sink, replication=replication)
        self.config = config
        self.tracker: ConceptTracker | None = None
        self.restored = False

    def follow(self, reference: ConceptReference | None) -> ConceptTracker | None:
        """The tracker of ``reference``'s version (a new version starts empty: another model's labels don't count)."""
        if reference is None:
            self.tracker = None
        elif self.tracker is None or self.tracker.reference.version != reference.version:
            self.tracker = ConceptTracker(reference, self.config)
            self._load()
        return self.tracker

    def _load(self) -> None:
        tracker = self.tracker
        if tracker is None:
            return
        meta_raw = self.table.get("meta")
        if meta_raw is None:
            return
        meta = orjson.loads(meta_raw)
        if meta.get("version") != tracker.reference.version:
            log.info("drift: concept state of version %s is not the served %s's: starting empty",
                     meta.get("version"), tracker.reference.version)
            return
        slots = [orjson.loads(v) for k, v in self.table.data.items() if k.startswith(b"slot:")]
        buckets = [orjson.loads(v) for k, v in self.table.data.items() if k.startswith(b"bucket:")]
        tracker.restore(slots, buckets, int(meta.get("watermark_ms", 0)))
        log.info("drift: concept state restored: %d tasks, %d matured buckets, watermark %d",
                 len(tracker.tasks), len(tracker.buckets), tracker.watermark_ms)

    def persist(self) -> None:
        """Queue the slots and buckets the last batch changed (sent by the stream's checkpoint)."""
        tracker = self.tracker
        if tracker is None or not (tracker.dirty_slots or tracker.dirty_buckets):
            return
        self.table.partition = PARTITION
        span = self.config.window_ms + tracker.horizons_ms[-1] + self.config.grace_ms
        n_buckets = -(-span // BUCKET_MS) + 2
        for slot in sorted(tracker.dirty_slots):
            self.table.put(f"slot:{slot}", orjson.dumps(tracker.slot_value(slot)))
        for bucket in sorted(tracker.dirty_buckets):
            if bucket in tracker.buckets:  # a forgotten bucket's cyclic key is overwritten by a newer one
                key = f"bucket:{(bucket // BUCKET_MS) % n_buckets}"
                self.table.put(key, orjson.dumps(tracker.bucket_value(bucket)))
        self.table.put("meta", orjson.dumps({"version": tracker.reference.version,
                                             "watermark_ms": tracker.watermark_ms}))
        tracker.dirty_slots.clear()
        tracker.dirty_buckets.clear()

    # -- StateHooks ---------------------------------------------------------------------------
    async def ensure(self, partitions: int) -> None:
        await self.table.ensure(partitions)

    async def restore(self, partitions: Sequence[int]) -> None:
        if PARTITION not in partitions:
            return
        await self.table.restore([PARTITION])
        self.restored = True
        if self.tracker is not None:
            self.tracker = ConceptTracker(self.tracker.reference, self.config)
            self._load()

    def forget(self, partitions: set[int]) -> None:
        if PARTITION in partitions:
            self.table.forget({PARTITION})
            if self.tracker is not None:
                self.tracker = ConceptTracker(self.tracker.reference, self.config)

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        await self.table.checkpoint(spread_s=spread_s)
