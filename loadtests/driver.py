"""The load driver: synthetic NodeState in real time, following a schedule of constant-rate phases.

    python -m loadtests.driver --plan PLAN.json --bootstrap B --topic-prefix P [--ticks-out F]
                               [--keys uniform|zipf] [--zipf-s 1.1] [--seed 0]

It is the replay machinery (simulator → ``SyntheticEncoder`` → ``BatchPublisher``) with a
rate schedule, run as its own process so its CPU is not the observer's. A phase of R
msg/s at interval I ms is R·I/1000 nodes ``sim-00000…`` each reporting once per
interval, ``ts_ms`` = the tick's due wall-clock time, ``seq`` = the global tick number
(so a node present in consecutive phases keeps a gap-free sequence). Each tick is sent
in ~50 slices per second so pacing is smooth. Falling behind is not hidden: late
slices go out as fast as possible and the achieved rate shows it.

``--task-rate`` adds a light TaskEvent stream (``loadtests.taskgen``) on the tasks' nodes.
stdout carries one JSON object per line: ``ready``, ``phase`` (name, t), ``progress``
(t, sent) every second and ``done`` (sent, seconds); ``--ticks-out`` writes one line per
tick (seq, ts_ms, nodes, phase) — with uniform keys this is the exact set of produced
(node, seq) pairs that the soak's loss accounting needs. SIGTERM stops after the
current slice, flushes and still prints ``done``; SIGUSR1 ends the current phase at the
next tick and goes on with the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from contracts.topics import Topic
from loadtests.keydist import ZipfKeys
from loadtests.load_plan import Phase, node_name, nodes_for
from loadtests.taskgen import TaskEvents


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(orjson.dumps({"event": event, **fields}).decode() + "\n")
    sys.stdout.flush()


@dataclass
class Generator:
    """One simulated cluster of a given size (phases of the same size share it)."""

    cluster: Any
    encoder: Any

    @classmethod
    def build(cls, nodes: int, interval_ms: int, seed: int) -> Generator:
        from services.node_agent.synthetic import SyntheticEncoder
        from simulator import SyntheticCluster

        cluster = SyntheticCluster(
            nodes=nodes, seed=seed, interval_ms=interval_ms, node_names=[node_name(i) for i in range(nodes)]
        )
        return cls(cluster, SyntheticEncoder(cluster))

    def records(self, ts_ms: int, seq: int) -> list[tuple[bytes, bytes]]:
        values = self.encoder.encode(self.cluster.tick(), ts_ms=ts_ms, seq=seq)
        return list(zip(self.encoder.keys, values, strict=True))


def paced_publisher(producer: Any, base_topic: str = Topic.NODESTATE) -> Any:
    """A BatchPublisher that can hand over its partly filled batches without waiting for acks.

    The replay path ships a partition's batch only when it is full (1 MB): right for
    throughput, but at a few hundred msg/s a record would wait seconds in the builder and
    that wait would count as pipeline latency. The driver ships after every slice (~20 ms).
    """
    from services.node_agent.publish import BatchPublisher

    class PacedPublisher(BatchPublisher):
        async def ship_pending(self) -> None:
            for part in list(self._builders):
                await self._ship(part)

    return PacedPublisher(producer, base_topic)


def load_plan(path: Path) -> list[Phase]:
    raw = orjson.loads(path.read_bytes())
    return [Phase(p["name"], float(p["rate"]), float(p["seconds"]), int(p.get("interval_ms", 1000))) for p in raw]


async def _sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0.001:
        await asyncio.sleep(delay)


async def drive(args: argparse.Namespace, phases: list[Phase]) -> int:
    from contracts.headers import build_headers
    from services.node_agent.publish import BatchingProducer, pick_compression

    generators: dict[tuple[int, int], Generator] = {}
    for phase in phases:
        key = (phase.nodes, phase.interval_ms)
        if key not in generators:
            gen = generators[key] = Generator.build(phase.nodes, phase.interval_ms, args.seed)
            gen.records(0, 0)  # the first tick draws every node's epoch: keep it out of the schedule
    zipf = ZipfKeys(args.zipf_s) if args.keys == "zipf" else None
    producer = BatchingProducer(
        bootstrap=args.bootstrap,
        client_id="borg-load-driver",
        topic_prefix=args.topic_prefix,
        compression=pick_compression(args.compression),
        linger_ms=5,
        max_batch_size=1_048_576,
        # a broker restart (the chaos scenario's, or a shared machine's) must not end the run: the
        # idempotent producer holds its batches through the outage instead of expiring them at 30 s
        request_timeout_ms=180_000,
    )
    await producer.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGUSR1 ends the current phase at the next tick (the chaos scenario ends its open-ended
    # fault phase when the last fault recovered, and still gets the flush phase after it)
    next_phase = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, next_phase.set)
    ticks: IO[bytes] | None = args.ticks_out.open("wb") if args.ticks_out else None
    sent = 0
    seq = 0
    started = time.time()
    try:
        publisher = paced_publisher(producer)
        await publisher.start()
        headers = build_headers(Topic.NODESTATE)
        tasks = TaskEvents(args.task_rate, seed=args.seed) if args.task_rate > 0 else None
        task_publisher = paced_publisher(producer, Topic.TASKEVENTS) if tasks is not None else None
        if task_publisher is not None:
            await task_publisher.start()
        task_headers = build_headers(Topic.TASKEVENTS)
        emit("ready", t=time.time())
        next_progress = time.time() + 1.0
        t_phase = time.time()
        for phase in phases:
            if stop.is_set():
                break
            emit("phase", name=phase.name, t=t_phase, rate=phase.rate, nodes=phase.nodes)
            gen = generators[(phase.nodes, phase.interval_ms)]
            period = phase.interval_ms / 1000.0
            n_ticks = max(1, round(phase.seconds / period))
            slices = max(1, min(50, round(50 * period)))
            ran = n_ticks
            for j in range(n_ticks):
                if stop.is_set():
                    break
                if next_phase.is_set():
                    next_phase.clear()
                    ran = j
                    break
                due = t_phase + j * period
                records = gen.records(round(due * 1000), seq)
                if zipf is not None:
                    records = zipf.apply(records)
                if ticks is not None:
                    ticks.write(orjson.dumps({"seq": seq, "ts_ms": round(due * 1000), "nodes": len(records),
                                              "phase": phase.name}) + b"\n")
                seq += 1
                if tasks is not None and task_publisher is not None:
                    await task_publisher.add_chunk(tasks.tick(due, round(due * 1000), phase.nodes, period),
                                                   task_headers)
                    await task_publisher.ship_pending()
                size = -(-len(records) // slices)
                for i in range(0, len(records), size):
                    await _sleep_until(due + (i / len(records)) * period)
                    await publisher.add_chunk(records[i : i + size], headers)
                    await publisher.ship_pending()
                    sent += len(records[i : i + size])
                    now = time.time()
                    if now >= next_progress:
                        emit("progress", t=now, sent=sent)
                        next_progress = now + 1.0
                    if stop.is_set():
                        break
            t_phase += ran * period
            await _sleep_until(t_phase)
        await publisher.flush()
        if task_publisher is not None:
            await task_publisher.flush()
        emit("progress", t=time.time(), sent=sent)
        emit("done", t=time.time(), sent=sent, seconds=time.time() - started, ticks=seq, stopped=stop.is_set(),
             task_events=tasks.emitted if tasks is not None else 0)
    finally:
        if ticks is not None:
            ticks.close()
        await producer.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtests.driver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", type=Path, required=True, help="JSON list of phases {name, rate, seconds, interval_ms}")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--topic-prefix", default="")
    p.add_argument("--ticks-out", type=Path, default=None)
    p.add_argument("--keys", choices=["uniform", "zipf"], default="uniform")
    p.add_argument("--zipf-s", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task-rate", type=float, default=0.0, help="TaskEvents/s on taskevents.v1 (for the risk stage)")
    p.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "snappy", "gzip", "none"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    phases = load_plan(args.plan)
    if any(nodes_for(p.rate, p.interval_ms) < 1 or p.seconds <= 0 for p in phases):
        print("driver: every phase needs a positive rate and duration", file=sys.stderr)
        return 2
    import gc

    gc.freeze()
    return asyncio.run(drive(args, phases))


if __name__ == "__main__":
    sys.exit(main())
