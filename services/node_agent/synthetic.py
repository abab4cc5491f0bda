"""The synthetic source: simulator.SyntheticCluster as NodeState, plus a fast encoder for replays.

Ground truth (regime, co-runners, slowdowns, anomalies) never enters the NodeState
stream: the agent writes it to a separate JSONL file when asked to.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from simulator import EVENTS, SyntheticCluster, TickBatch
from simulator.cluster import MULTIPLEXABLE


class SyntheticEncoder:
    """Encodes TickBatches to NodeState JSON without building fresh dicts per message.

    Each node keeps one NodeState-shaped dict whose numbers are overwritten in place
    every tick and serialised with orjson (about 4 µs per NodeState instead of ~11 µs
    for fresh nested dicts). Counts are integers in JSON (valid for the float fields).
    """

    def __init__(self, cluster: SyntheticCluster, *, source: str = "synthetic") -> None:
        enabled = cluster.interval_ms * 1_000_000
        self.interval_ms = cluster.interval_ms
        self.keys = [spec.name.encode() for spec in cluster.specs]
        self._nodes: list[
            tuple[
                dict[str, Any], list[dict[str, Any]], list[tuple[dict[str, Any], int]], list[tuple[dict[str, Any], int]]
            ]
        ] = []
        cols = {name: j for j, name in enumerate(EVENTS)}
        for spec in cluster.specs:
            counters: dict[str, dict[str, Any]] = {}
            plain: list[tuple[dict[str, Any], int]] = []
            mux: list[tuple[dict[str, Any], int]] = []
            for name in EVENTS:
                j = cols[name]
                if name in spec.missing:
                    counters[name] = {
                        "raw": None,
                        "value": None,
                        "enabled_ns": 0,
                        "running_ns": 0,
                        "status": "not_supported",
                    }
                    continue
                status = "multiplexed" if spec.multiplexed and j in MULTIPLEXABLE else "counted"
                counter = {"raw": 0, "value": 0, "enabled_ns": enabled, "running_ns": enabled, "status": status}
                counters[name] = counter
                (mux if status == "multiplexed" else plain).append((counter, j))
            state = {
                "node": spec.name,
                "ts_ms": 0,
                "seq": 0,
                "interval_ms": cluster.interval_ms,
                "source": source,
                "pmu": "hardware",
                "supported_events": spec.supported_events,
                "counters": counters,
                "cpu_util": 0.0,
                "mem_util": 0.0,
                "cpu_freq_mhz": 0.0,
            }
            all_plain = [c for c, _ in plain] if not mux and len(plain) == len(EVENTS) else []
            self._nodes.append((state, all_plain, plain if not all_plain else [], mux))

    def encode(self, batch: TickBatch, *, ts_ms: int, seq: int) -> list[bytes]:
        """One JSON value per node (same order as ``keys``)."""
        values = np.nan_to_num(batch.values).astype(np.int64).tolist()
        util = batch.cpu_util.tolist()
        mem = batch.mem_util.tolist()
        freq = batch.cpu_freq_mhz.tolist()
        raws: list[list[int]] | None = None
        runs: list[list[int]] | None = None
        dumps = orjson.dumps
        out = []
        for i, (state, all_plain, plain, mux) in enumerate(self._nodes):
            state["ts_ms"] = ts_ms
            state["seq"] = seq
            state["cpu_util"] = util[i]
            state["mem_util"] = mem[i]
            state["cpu_freq_mhz"] = freq[i]
            row = values[i]
            if all_plain:
                for counter, v in zip(all_plain, row, strict=True):
                    counter["raw"] = v
                    counter["value"] = v
            else:
                for counter, j in plain:
                    v = row[j]
                    counter["raw"] = v
                    counter["value"] = v
                if mux:
                    if raws is None or runs is None:
                        raws = np.nan_to_num(batch.raw).astype(np.int64).tolist()
                        runs = batch.running_ns.tolist()
                    raw_row, run_row = raws[i], runs[i]
                    for counter, j in mux:
                        counter["raw"] = raw_row[j]
                        counter["value"] = row[j]
                        counter["running_ns"] = run_row[j]
            out.append(dumps(state))
        return out


class SyntheticSource:
    """Agent source: one or more simulated nodes; ground truth optionally to a JSONL file."""

    name = "synthetic"
    pmu = "hardware"

    def __init__(
        self, *, node: str, nodes: int = 1, seed: int = 0, interval_ms: int = 1000, truth_path: str | None = None
    ) -> None:
        names = [node] if nodes == 1 else [f"{node}-{i:04d}" for i in range(nodes)]
        self.cluster = SyntheticCluster(nodes=nodes, seed=seed, interval_ms=interval_ms, node_names=names)
        self.truth_path = truth_path
        self._truth: IO[bytes] | None = None

    def open(self) -> None:
        if self.truth_path:
            Path(self.truth_path).parent.mkdir(parents=True, exist_ok=True)
            self._truth = open(self.truth_path, "ab")  # noqa: SIM115 - closed in close()

    def sample(self, *, ts_ms: int, seq: int, interval_ms: int) -> list[dict[str, Any]]:
        batch = self.cluster.tick()
        states = batch.nodestate_dicts(ts_ms=ts_ms)
        for state in states:
            state["seq"] = seq
        if self._truth is not None:
            for record in batch.truth_records():
                record["ts_ms"] = ts_ms
                record["seq"] = seq
                self._truth.write(orjson.dumps(record) + b"\n")
            self._truth.flush()
        return states

    def close(self) -> None:
        if self._truth is not None:
            self._truth.close()
            self._truth = None
