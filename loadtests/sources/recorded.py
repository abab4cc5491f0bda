"""Recorded node data: raw `perf stat` files and Alibaba 2018 machine_usage CSV → NodeState."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

from contracts.topics import Topic
from loadtests.sources import Chunk, Clock
from services.node_agent.perfstat import PerfReport, parse_perf_stat_file
from services.node_agent.recorded import (
    DEFAULT_ALIBABA_INTERVAL_MS,
    AlibabaRow,
    alibaba_nodestate,
    perf_report_nodestates,
    read_alibaba,
)


def _files(path: Path, patterns: tuple[str, ...]) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or directory: {path}")
    found = sorted({p for pattern in patterns for p in path.rglob(pattern) if p.is_file()})
    if not found:
        raise FileNotFoundError(f"no {' or '.join(patterns)} files under {path}")
    return found


class PerfStatReplay:
    """Every perf stat file is one node (named by its path); samples ordered by start time."""

    base_topic = Topic.NODESTATE
    what = "NodeState"

    def __init__(self, path: Path, *, nodes: int | None = None) -> None:
        self.root = path
        self.files = _files(path, ("*.out", "*.txt", "*.csv", "*.perf"))
        if nodes:
            self.files = self.files[:nodes]

    def _node(self, file: Path) -> str:
        rel = file.relative_to(self.root) if self.root.is_dir() else Path(file.name)
        return ".".join(rel.with_suffix("").parts)

    def chunks(self, clock: Clock) -> Iterator[Chunk]:
        reports: list[tuple[float, Path, PerfReport]] = []
        for file in self.files:
            report = parse_perf_stat_file(file)
            started = report.started.timestamp() if report.started else 0.0
            reports.append((started, file, report))
        reports.sort(key=lambda r: (r[0], str(r[1])))
        t0 = reports[0][0] if reports else 0.0
        for started, file, report in reports:
            offset = started - t0
            node = self._node(file)
            states = perf_report_nodestates(report, node=node, start_ms=clock.ts_ms(offset))
            key = node.encode()
            for state in states:
                sample_offset = offset + (state["ts_ms"] - clock.ts_ms(offset)) / 1000.0
                state["ts_ms"] = clock.ts_ms(sample_offset)
                yield Chunk(clock.due_s(sample_offset), [(key, orjson.dumps(state))])


class AlibabaReplay:
    """machine_usage rows in trace-time order across machines; per-machine seq and interval."""

    base_topic = Topic.NODESTATE
    what = "NodeState"

    def __init__(self, path: Path, *, nodes: int | None = None) -> None:
        self.files = _files(path, ("machine_usage*.csv", "*.csv"))
        self.nodes = nodes

    def _rows(self) -> list[AlibabaRow]:
        rows: list[AlibabaRow] = []
        for file in self.files:
            with file.open(encoding="utf-8") as fh:
                rows.extend(read_alibaba(fh, str(file)))
        if self.nodes:
            keep = set(sorted({r.machine for r in rows})[: self.nodes])
            rows = [r for r in rows if r.machine in keep]
        rows.sort(key=lambda r: r.time_s)  # stable: per machine, file order is kept for equal times
        return rows

    def chunks(self, clock: Clock) -> Iterator[Chunk]:
        rows = self._rows()
        if not rows:
            return
        t0 = rows[0].time_s
        last_time: dict[str, int] = {}
        seq: dict[str, int] = {}
        chunk: Chunk | None = None
        for row in rows:
            previous = last_time.get(row.machine)
            interval_ms = (
                DEFAULT_ALIBABA_INTERVAL_MS
                if previous is None or row.time_s <= previous
                else (row.time_s - previous) * 1000
            )
            last_time[row.machine] = row.time_s
            n = seq.get(row.machine, 0)
            seq[row.machine] = n + 1
            offset = float(row.time_s - t0)
            state = alibaba_nodestate(row, seq=n, ts_ms=clock.ts_ms(offset), interval_ms=interval_ms)
            due = clock.due_s(offset)
            if chunk is None or chunk.due_s != due or len(chunk.records) >= 500:
                if chunk is not None:
                    yield chunk
                chunk = Chunk(due)
            chunk.records.append((row.machine.encode(), orjson.dumps(state)))
        if chunk is not None:
            yield chunk
