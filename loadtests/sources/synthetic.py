"""Synthetic NodeState from simulator.SyntheticCluster (ground truth optionally to JSONL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

from contracts.topics import Topic
from loadtests.sources import Chunk, Clock
from services.node_agent.synthetic import SyntheticEncoder
from simulator import SyntheticCluster


class SyntheticReplay:
    base_topic = Topic.NODESTATE
    what = "NodeState"

    def __init__(
        self,
        *,
        nodes: int,
        seed: int,
        interval_ms: int = 1000,
        anomaly_rate: float = 0.0,
        ticks: int | None = None,
        truth_out: Path | None = None,
    ) -> None:
        self.cluster = SyntheticCluster(nodes=nodes, seed=seed, interval_ms=interval_ms, anomaly_rate=anomaly_rate)
        self.encoder = SyntheticEncoder(self.cluster)
        self.ticks = ticks
        self.truth_out = truth_out

    def chunks(self, clock: Clock) -> Iterator[Chunk]:
        keys = self.encoder.keys
        truth = self.truth_out.open("wb") if self.truth_out else None
        try:
            tick = 0
            while self.ticks is None or tick < self.ticks:
                batch = self.cluster.tick()
                offset = tick * self.cluster.interval_ms / 1000.0
                ts = clock.ts_ms(offset)
                values = self.encoder.encode(batch, ts_ms=ts, seq=tick)
                if truth is not None:
                    for record in batch.truth_records():
                        record["ts_ms"] = ts
                        record["seq"] = tick
                        truth.write(orjson.dumps(record) + b"\n")
                yield Chunk(clock.due_s(offset), list(zip(keys, values, strict=True)))
                tick += 1
        finally:
            if truth is not None:
                truth.close()
