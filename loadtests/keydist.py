"""Key distributions for NodeState load: uniform (every node once per interval) or Zipf.

Zipf keeps the number of records per chunk (so the offered rate is unchanged) but
gives the node of popularity rank r (1-based, in order of first appearance) a share
proportional to 1/r^s: hot nodes report several times per interval, cold nodes
rarely. Shares are apportioned deterministically (carried-over credit), so a run is
reproducible. Every emitted record gets its node's next sequence number, so the
per-node `seq` stays gap-free and (node, seq) stays unique.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Literal

from contracts.topics import Topic
from loadtests.sources import Chunk, Clock, Record, ReplaySource

KeyDistribution = Literal["uniform", "zipf"]
_SEQ = re.compile(rb'"seq":\s*\d+')


def zipf_weights(n: int, s: float) -> list[float]:
    """Normalised 1/r^s for ranks 1..n."""
    if n <= 0:
        return []
    raw = [1.0 / (r**s) for r in range(1, n + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def with_seq(value: bytes, seq: int) -> bytes:
    """A NodeState JSON value with its top-level `seq` replaced."""
    out, count = _SEQ.subn(b'"seq":%d' % seq, value, count=1)
    if count != 1:
        raise ValueError("record has no seq field (zipf keys need NodeState records)")
    return out


class ZipfKeys:
    """Re-distributes the records of each chunk over keys with Zipf popularity."""

    def __init__(self, s: float = 1.1) -> None:
        if s <= 0:
            raise ValueError("zipf exponent must be > 0")
        self.s = s
        self._rank: dict[bytes, int] = {}
        self._credit: list[float] = []
        self._weights: list[float] = []
        self._seq: dict[bytes, int] = {}

    def _ranks(self, keys: Sequence[bytes]) -> None:
        grew = False
        for key in keys:
            if key not in self._rank:
                self._rank[key] = len(self._rank)
                grew = True
        if grew:
            self._weights = zipf_weights(len(self._rank), self.s)
            self._credit += [0.0] * (len(self._rank) - len(self._credit))

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """As many records as given; node rank r appears about n·w_r times (latest value reused)."""
        if not records:
            return []
        self._ranks([k for k, _ in records])
        n = len(records)
        present = sorted((self._rank[k], k, v) for k, v in records)
        weight_sum = sum(self._weights[r] for r, _, _ in present)
        out: list[Record] = []
        for rank, key, value in present:
            self._credit[rank] += n * self._weights[rank] / weight_sum
            copies = int(self._credit[rank])
            self._credit[rank] -= copies
            for _ in range(copies):
                seq = self._seq.get(key, 0)
                self._seq[key] = seq + 1
                out.append((key, with_seq(value, seq)))
        return out


class ZipfSource:
    """A NodeState ReplaySource whose chunks are re-keyed by ZipfKeys."""

    def __init__(self, inner: ReplaySource, s: float = 1.1) -> None:
        if inner.base_topic != Topic.NODESTATE:
            raise ValueError(f"--keys zipf applies to NodeState sources, not {inner.base_topic}")
        self.inner = inner
        self.base_topic = inner.base_topic
        self.what = inner.what
        self.keys = ZipfKeys(s)

    def chunks(self, clock: Clock) -> Iterator[Chunk]:
        for chunk in self.inner.chunks(clock):
            yield Chunk(chunk.due_s, self.keys.apply(chunk.records))

    def __getattr__(self, name: str) -> object:  # after_end and friends of the wrapped source
        return getattr(self.inner, name)
