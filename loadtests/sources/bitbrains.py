"""Bitbrains GWA-T-12 per-VM utilisation files (``<dir>/<vm>.csv[.gz]``, any depth) → NodeState.

Each VM is a node ``bitbrains-<vm>``; its files (one per month in the shared data) are one series,
ordered by their first timestamp. Rows of all VMs are merged in trace-time order; ``seq`` counts per
node and ``interval_ms`` is the time since the node's previous row (300 s for its first).
Utilisation only: ``cpu_util`` = CPU usage [%] / 100, ``mem_util`` = memory usage / capacity, both
clipped to 0..1; there are no PMU counters, so — as the Alibaba replay does — ``counters`` and
``supported_events`` are empty and ``pmu`` is ``recorded`` (the features stage marks every counter
feature invalid and the regime stage abstains with ``counters_missing``). Errors name ``file:line``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import orjson

from contracts.topics import Topic
from loadtests.sources import Chunk, Clock
from services.node_agent.nodestate import nodestate_dict
from training.forecast.bitbrains import Row, read_rows, vm_name

SOURCE: Final = "replay_bitbrains"
NODE_PREFIX: Final = "bitbrains-"
DEFAULT_INTERVAL_MS: Final = 300_000
CHUNK_MAX: Final = 500


def bitbrains_files(path: Path) -> dict[str, list[Path]]:
    if path.is_file():
        return {vm_name(path): [path]}
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or directory: {path}")
    out: dict[str, list[Path]] = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".csv", ".csv.gz"))):
        out.setdefault(vm_name(file), []).append(file)
    if not out:
        raise FileNotFoundError(f"no <vm>.csv or <vm>.csv.gz files under {path}")
    return out


def bitbrains_nodestate(node: str, row: Row, *, seq: int, ts_ms: int, interval_ms: int) -> dict[str, Any]:
    """NodeState of one row: utilisation only; no counters, so none is claimed supported."""
    return nodestate_dict(
        node=node,
        ts_ms=ts_ms,
        seq=seq,
        interval_ms=min(3_600_000, max(1, interval_ms)),
        source=SOURCE,
        pmu="recorded",
        supported_events=[],
        counters={},
        cpu_util=row.cpu_pct / 100.0,
        mem_util=0.0 if row.mem_pct != row.mem_pct else row.mem_pct / 100.0,
    )


def _first_time(file: Path) -> int:
    for row in read_rows(file):
        return row.time_s
    return 0


class BitbrainsReplay:
    base_topic = Topic.NODESTATE
    what = "NodeState"

    def __init__(self, path: Path, *, nodes: int | None = None) -> None:
        files = bitbrains_files(path)
        names = sorted(files, key=lambda n: (len(n), n))  # numeric-looking ids in numeric order
        if nodes:
            names = names[:nodes]
        self.vms = {name: files[name] for name in names}

    def _series(self, vm: str) -> Iterator[tuple[int, str, Row]]:
        ordered = sorted(self.vms[vm], key=lambda f: (_first_time(f), str(f)))
        for row in itertools.chain.from_iterable(read_rows(f) for f in ordered):
            yield row.time_s, vm, row

    def chunks(self, clock: Clock) -> Iterator[Chunk]:
        merged = heapq.merge(*(self._series(vm) for vm in self.vms), key=lambda item: item[0])
        t0: int | None = None
        last: dict[str, int] = {}
        seq: dict[str, int] = {}
        chunk: Chunk | None = None
        for time_s, vm, row in merged:
            if t0 is None:
                t0 = time_s
            previous = last.get(vm)
            interval_ms = DEFAULT_INTERVAL_MS if previous is None or time_s <= previous else (time_s - previous) * 1000
            last[vm] = time_s
            n = seq.get(vm, 0)
            seq[vm] = n + 1
            offset = float(time_s - t0)
            node = NODE_PREFIX + vm
            state = bitbrains_nodestate(node, row, seq=n, ts_ms=clock.ts_ms(offset), interval_ms=interval_ms)
            due = clock.due_s(offset)
            if chunk is None or chunk.due_s != due or len(chunk.records) >= CHUNK_MAX:
                if chunk is not None:
                    yield chunk
                chunk = Chunk(due)
            chunk.records.append((node.encode(), orjson.dumps(state)))
        if chunk is not None:
            yield chunk
