"""`borgctl replay`: recorded or synthetic traffic onto the topics, at a chosen speed.

    borgctl replay --source synthetic   [--nodes 100] [--seed 0] [--count N | --duration S] [--rate R] [--speedup X]
                                       [--keys uniform|zipf [--zipf-s 1.1]]
    borgctl replay --source perfstat    [--path DIR|FILE]   (raw `perf stat` output → NodeState)
    borgctl replay --source alibaba2018 [--path DIR|FILE]   (machine_usage CSV → NodeState)
    borgctl replay --source google2011  [--path DIR|FILE]   (task_events part files → TaskEvent)
    borgctl replay --source bitbrains   [--path DIR|FILE]   (Bitbrains per-VM CSV → NodeState, utilisation only)

Speed: ``--rate R`` paces at R messages/s; otherwise ``--speedup X`` (given explicitly) paces by
trace time compressed X times; otherwise as fast as the broker takes it. Record timestamps are
``start + trace time / speedup`` either way. ``--count`` / ``--duration`` stop early (a synthetic
replay with neither runs 60 ticks). A progress line with the achieved rate goes to stderr.
Input errors name the file and line and exit with status 2; an unreachable broker exits with 3.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aiokafka.errors import KafkaError

from contracts import telemetry as names
from contracts.headers import build_headers
from contracts.topics import topic_spec
from loadtests.sources import Chunk, Clock, ReplaySource
from services.node_agent.errors import InputLineError

DATA_DIRS = {
    "perfstat": "perfstat",
    "alibaba2018": "alibaba2018",
    "google2011": "google2011",
    "bitbrains": "bitbrains_rnd",
}
DEFAULT_SYNTHETIC_TICKS = 60


@dataclass
class Summary:
    sent: int = 0
    seconds: float = 0.0
    what: str = "messages"
    dry_run: bool = False
    cpu_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


class ReplayError(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="borgctl replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--source", required=True, choices=["synthetic", "perfstat", "alibaba2018", "google2011", "bitbrains"]
    )
    p.add_argument("--path", type=Path, help="file or directory (default: $BORG_DATA_DIR/<source>, ../shared/data)")
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="synthetic: nodes to simulate (default 100); recorded: use the first N nodes",
    )
    p.add_argument("--rate", type=float, default=None, help="messages per second (default: as fast as possible)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--count", type=int, default=None, help="stop after this many messages")
    p.add_argument(
        "--speedup", type=float, default=None, help="trace-time compression (default 1; also paces when given)"
    )
    p.add_argument("--seed", type=int, default=0, help="synthetic: simulator seed")
    p.add_argument(
        "--keys",
        choices=["uniform", "zipf"],
        default="uniform",
        help="NodeState key distribution: uniform (every node once per interval) or zipf (hot nodes; "
        "same record count, per-node seq kept gap-free; see loadtests/keydist.py)",
    )
    p.add_argument("--zipf-s", type=float, default=1.1, help="--keys zipf: exponent s (share of rank r ∝ 1/r^s)")
    p.add_argument("--interval-ms", type=int, default=1000, help="synthetic: sampling interval")
    p.add_argument("--anomaly-rate", type=float, default=0.0, help="synthetic: anomaly starts per node and interval")
    p.add_argument(
        "--truth-out", type=Path, default=None, help="synthetic: write ground truth JSONL here (never on a topic)"
    )
    p.add_argument("--start-ms", type=int, default=None, help="timestamp of trace time 0 (default: now)")
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--topic-prefix", default=os.environ.get("BORG_TOPIC_PREFIX", ""))
    p.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "snappy", "gzip", "none"])
    p.add_argument("--dry-run", action="store_true", help="read and encode, send nothing (measures the source)")
    p.add_argument("--validate", action="store_true", help="validate every message against its contract (slow)")
    p.add_argument("--quiet", action="store_true", help="no progress line, only the summary")
    return p


def _data_path(source: str, path: Path | None) -> Path:
    if path is not None:
        return path
    root = Path(os.environ.get("BORG_DATA_DIR", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
    return root / DATA_DIRS[source]


def make_source(args: argparse.Namespace) -> ReplaySource:
    if args.source == "synthetic":
        from loadtests.sources.synthetic import SyntheticReplay

        ticks = None if (args.count or args.duration) else DEFAULT_SYNTHETIC_TICKS
        return SyntheticReplay(
            nodes=args.nodes or 100,
            seed=args.seed,
            interval_ms=args.interval_ms,
            anomaly_rate=args.anomaly_rate,
            ticks=ticks,
            truth_out=args.truth_out,
        )
    path = _data_path(args.source, args.path)
    try:
        if args.source == "perfstat":
            from loadtests.sources.recorded import PerfStatReplay

            return PerfStatReplay(path, nodes=args.nodes)
        if args.source == "alibaba2018":
            from loadtests.sources.recorded import AlibabaReplay

            return AlibabaReplay(path, nodes=args.nodes)
        if args.source == "bitbrains":
            from loadtests.sources.bitbrains import BitbrainsReplay

            return BitbrainsReplay(path, nodes=args.nodes)
        from loadtests.sources.google2011 import Google2011Replay

        return Google2011Replay(path)
    except FileNotFoundError as exc:
        raise ReplayError(str(exc)) from None


class Progress:
    def __init__(self, label: str, stream: TextIO, quiet: bool) -> None:
        self.label, self.stream, self.quiet = label, stream, quiet
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self._next = self.started + (1.0 if self.tty else 5.0)
        self._last = (self.started, 0)

    def update(self, sent: int) -> None:
        now = time.monotonic()
        if self.quiet or now < self._next:
            return
        t_last, n_last = self._last
        recent = (sent - n_last) / max(now - t_last, 1e-9)
        overall = sent / max(now - self.started, 1e-9)
        line = f"{self.label}: {sent:,} sent, {overall:,.0f}/s overall, {recent:,.0f}/s now"
        self.stream.write(("\r" + line + "   ") if self.tty else line + "\n")
        self.stream.flush()
        self._last = (now, sent)
        self._next = now + (1.0 if self.tty else 5.0)

    def done(self, summary: Summary) -> None:
        if self.tty and not self.quiet:
            self.stream.write("\n")
        how = "encoded, dry run" if summary.dry_run else "all acknowledged"
        self.stream.write(
            f"{self.label}: sent {summary.sent:,} {summary.what} in {summary.seconds:.2f}s "
            f"= {summary.rate:,.0f} msg/s ({how})\n"
        )
        self.stream.flush()


def _limited(chunks: Iterator[Chunk], count: int | None, rate: float | None) -> Iterator[Chunk]:
    """Cut chunks at --count and into small slices under --rate (so pacing is smooth)."""
    left = count
    piece = max(1, int(rate / 50)) if rate else None
    for chunk in chunks:
        records = chunk.records
        if left is not None:
            records = records[:left]
            left -= len(records)
        if piece is None:
            yield Chunk(chunk.due_s, records)
        else:
            for i in range(0, len(records), piece):
                yield Chunk(chunk.due_s, records[i : i + piece])
        if left is not None and left <= 0:
            return


async def _pace(started: float, target_s: float) -> None:
    delay = started + target_s - time.monotonic()
    if delay > 0.002:
        await asyncio.sleep(delay)


async def run(args: argparse.Namespace, source: ReplaySource, progress: Progress) -> Summary:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    from services.node_agent.publish import BatchingProducer, BatchPublisher, pick_compression
    from services.runtime.admin import create_topics

    spec = topic_spec(source.base_topic)
    speedup = args.speedup or 1.0
    clock = Clock(start_ms=args.start_ms if args.start_ms is not None else int(time.time() * 1000), speedup=speedup)
    pace_by_trace = args.rate is None and args.speedup is not None
    publisher: BatchPublisher | None = None
    producer: BatchingProducer | None = None
    if not args.dry_run:
        producer = BatchingProducer(
            bootstrap=args.bootstrap,
            client_id="borgctl-replay",
            topic_prefix=args.topic_prefix,
            compression=pick_compression(args.compression),
            linger_ms=5,
            max_batch_size=1_048_576,
        )
        try:
            await producer.start()
            # The registry's partitions and config, not the broker's auto-create defaults.
            await asyncio.wait_for(create_topics(args.bootstrap, prefix=args.topic_prefix, specs=(spec,)), timeout=30)
        except Exception as exc:
            await producer.close_now()
            raise ReplayError(f"cannot reach Kafka at {args.bootstrap}: {type(exc).__name__}: {exc}", 3) from None
        publisher = BatchPublisher(producer, source.base_topic)
        await publisher.start()
    tracer = trace.get_tracer("borg.replay")
    topic = f"{args.topic_prefix}{source.base_topic}"
    summary = Summary(what=source.what, dry_run=publisher is None)
    started = time.monotonic()
    cpu_started = time.process_time()
    deadline = started + args.duration if args.duration else None
    try:
        for chunk in _limited(source.chunks(clock), args.count, args.rate):
            if pace_by_trace:
                await _pace(started, chunk.due_s)
            elif args.rate:
                await _pace(started, summary.sent / args.rate)
            if args.validate:
                for _, value in chunk.records:
                    spec.model.model_validate_json(value)
            with tracer.start_as_current_span(
                names.SPAN_PUBLISH.format(topic=source.base_topic), kind=SpanKind.PRODUCER
            ) as span:
                span.set_attribute(names.MESSAGING_DESTINATION, topic)
                span.set_attribute(names.MESSAGING_BATCH_COUNT, len(chunk.records))
                headers = build_headers(spec.schema)
            if publisher is not None:
                await publisher.add_chunk(chunk.records, headers)
            summary.sent += len(chunk.records)
            progress.update(summary.sent)
            if deadline is not None and time.monotonic() >= deadline:
                break
        if publisher is not None:
            await publisher.flush()
    finally:
        if producer is not None:
            await producer.stop()
    summary.seconds = time.monotonic() - started
    summary.cpu_seconds = time.process_time() - cpu_started
    return summary


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    for name in ("rate", "duration", "speedup"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            print(f"replay: --{name} must be > 0", file=sys.stderr)
            return 2
    if args.count is not None and args.count <= 0:
        print("replay: --count must be > 0", file=sys.stderr)
        return 2
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from services.runtime.telemetry import setup_tracing

        setup_tracing(
            "replay", os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"], float(os.environ.get("OTEL_SAMPLE_RATIO", "1.0"))
        )
    import gc

    gc.freeze()  # the hot loop allocates short-lived dicts and bytes only; skip rescanning start-up objects
    try:
        source = make_source(args)
        if args.keys == "zipf":
            from loadtests.keydist import ZipfSource

            source = ZipfSource(source, args.zipf_s)
        progress = Progress(f"replay {args.source}", sys.stderr, args.quiet)
        summary = asyncio.run(run(args, source, progress))
    except (InputLineError, ReplayError) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return exc.code if isinstance(exc, ReplayError) else 2
    except KafkaError as exc:
        print(f"replay: Kafka at {args.bootstrap} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    except (ValueError, OSError) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("replay: interrupted", file=sys.stderr)
        return 130
    finally:
        gc.unfreeze()
    progress.done(summary)
    after_end = getattr(source, "after_end", 0)
    if after_end:
        print(f"replay: skipped {after_end:,} event(s) stamped after the trace window", file=sys.stderr)
    return 0
