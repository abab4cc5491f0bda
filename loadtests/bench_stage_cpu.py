"""CPU per message of one stream stage's batch handler, in process, over a recorded input.

``python -m loadtests.bench_stage_cpu record --out DIR`` simulates NodeState (``loadgen``'s pool, headers as
``bench stages`` prefills them) and runs the features processor over it once, recording its input
(``nodestate.bin``) and its FeatureVector outputs with their headers (``featurevector.bin``: the input of
regime and anomaly, traceparent included, as ``bench stages`` feeds them).

``python -m loadtests.bench_stage_cpu run --stage S --input DIR [--rounds R]`` replays the recorded input
through stage ``S``'s batch handler ``R`` times (fresh state each round; batches of the stage's
``batch_max`` over 6 partitions, as ``BatchStream`` hands them; the process tuned as ``run_stream`` tunes a
stage, ``--no-tune`` for CPython's defaults) and prints one JSON line: the median
``time.process_time()`` per input message (µs) and a SHA-256 of everything the stage wrote (keys, values,
headers with the span ids of ``traceparent`` blanked, since they are random; changelog records; dead
letters). The digest is what proves a change bit-identical: run the same command in a copy of the tree from
before the change and compare. Everything the service does per message is in the timed part: decode,
state, the model, spans (a sampling tracer provider without processors, as services without an OTLP endpoint
run), headers and the ``Sink``'s batch building; only the network is not (the producer is never started:
closed batches are dropped, as the broker would take them).

A/B between two trees: run both commands alternately, several rounds each, on the same input directory, and
compare medians (docs/performance.md, "2026-11-27: stage CPU in process"). ``STREAM_BATCH_MAX=N`` in the
environment replays batches of N instead (live features batches held ~140 NodeStates at 2,500/s per process:
docs/performance.md, "2026-11-27 evening"); the digest then differs from the default's (the order of outputs
across partitions follows the batches), so compare digests at the same N.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import statistics
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition

from contracts.topics import Topic

PARTITIONS = 6
CHECKPOINT_EVERY = 10_000
"""features: NodeStates between checkpoints (a commit a second at ~10,000 NodeState/s)."""


# ------------------------------------------------------------------------------ recorded messages


def _write(path: Path, records: list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]]) -> None:
    with path.open("wb") as f:
        f.write(orjson.dumps([[p, k.decode(), v.decode(), [[h, hv.decode()] for h, hv in hs], ts]
                              for p, k, v, hs, ts in records]))


def _read(path: Path, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    out: list[ConsumerRecord[bytes, bytes]] = []
    for i, (p, k, v, hs, ts) in enumerate(orjson.loads(path.read_bytes())):
        key, value = k.encode(), v.encode()
        headers = [(h, hv.encode()) for h, hv in hs]
        out.append(ConsumerRecord(topic, p, i, ts, 0, key, value, None, len(key), len(value), headers))
    return out


def batches_of(records: list[ConsumerRecord[bytes, bytes]], size: int) -> Iterator[dict[TopicPartition, list[Any]]]:
    """``BatchStream``'s batches: up to ``size`` records (the stage's ``batch_max``), grouped by partition."""
    for start in range(0, len(records), size):
        batch: dict[TopicPartition, list[Any]] = {}
        for r in records[start:start + size]:
            batch.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
        yield batch


# ------------------------------------------------------------------------------ the sink without a broker


class _Recorder:
    """What a stage wrote, in order; ``digest`` blanks the random span ids of traceparent headers."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.count = 0

    def add(self, kind: bytes, key: bytes | None, value: bytes | None, headers: Any) -> None:
        self.count += 1
        h = self.h
        h.update(kind)
        for part in (key or b"", value or b""):
            h.update(struct.pack("<I", len(part)))
            h.update(part)
        for name, v in headers or ():
            h.update(name.encode())
            h.update(b"tp-" + v[-2:] if name == "traceparent" else v)


class _RecordingBatch:
    def __init__(self, real: Any, recorder: _Recorder) -> None:
        self._real = real
        self._recorder = recorder

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: Any, headers: Any = None) -> Any:
        meta = self._real.append(key=key, value=value, timestamp=timestamp, headers=headers)
        if meta is not None:
            self._recorder.add(b"out", key, value, headers)
        return meta

    def close(self) -> None:
        self._real.close()


class _OfflineProducer:
    """The producer calls ``Sink`` makes, minus the network: real batches, dropped when handed over."""

    def __init__(self, recorder: _Recorder | None) -> None:
        self._real = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", enable_idempotence=True, acks="all",
                                      linger_ms=5, max_batch_size=262_144)
        self._recorder = recorder

    def create_batch(self) -> Any:
        if self._recorder is None:  # a timed round: the producer's own batch, nothing in between
            return self._real.create_batch()
        return _RecordingBatch(self._real.create_batch(), self._recorder)

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        batch.close()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                   partition: Any = None) -> asyncio.Future[Any]:
        if self._recorder is not None:
            self._recorder.add(b"send", key, value, headers)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(PARTITIONS))


def offline_sink(service: str, recorder: _Recorder | None) -> Any:
    from services.runtime.stream_io import Sink

    sink = Sink(bootstrap="127.0.0.1:1", service=service, topic_prefix="")
    sink._producer = _OfflineProducer(recorder)  # type: ignore[assignment]
    return sink


# ------------------------------------------------------------------------------ the stages


def _tracing() -> None:
    from services.runtime.telemetry import setup_tracing

    setup_tracing("bench-stage-cpu", None)  # sampled spans, no processors: as bench stages' services


async def _features(records: list[Any], recorder: _Recorder | None) -> float:
    from services.features.processor import FeaturesProcessor
    from services.features.settings import FeaturesSettings

    proc = FeaturesProcessor(FeaturesSettings(), offline_sink("features", recorder))
    batches = list(batches_of(records, proc.stream.batch_max))
    gc.collect()
    start = time.process_time()
    since = 0
    for batch in batches:
        await proc.handle(batch)
        await proc.sink.push()
        since += sum(len(r) for r in batch.values())
        if since >= CHECKPOINT_EVERY:  # the service checkpoints at every commit, once a second
            await proc.state.checkpoint()
            since = 0
    await proc.state.checkpoint()
    return time.process_time() - start


async def _regime(records: list[Any], recorder: _Recorder | None) -> float:
    from services.regime.model import RegimeModel, load_regime_model
    from services.regime.processor import RegimeProcessor
    from services.regime.settings import RegimeSettings
    from services.regime.shadow import RegimeShadow, RegimeShadowStats
    from services.runtime.model_watch import ModelWatcher
    from services.runtime.rollout_watch import RolloutWatcher

    settings = RegimeSettings(model_dir=Path("models/regime"))
    models: ModelWatcher[RegimeModel] = ModelWatcher("regime", settings.model_dir, load_regime_model, poll_s=3600)
    stats = RegimeShadowStats()
    rollout = RolloutWatcher("regime", settings.model_dir, load_regime_model, stats, settings,
                             serving=lambda: models.version_dir.name)
    rollout.check()
    proc = RegimeProcessor(settings, offline_sink("regime", recorder), models, rollout, RegimeShadow(stats, None))
    return await _drain(proc._handle, proc.sink, records, proc.stream.batch_max)


async def _anomaly(records: list[Any], recorder: _Recorder | None) -> float:
    from services.anomaly.model import AnomalyModel, load_anomaly_model
    from services.anomaly.processor import AnomalyProcessor
    from services.anomaly.settings import AnomalySettings
    from services.runtime.model_watch import ModelWatcher

    settings = AnomalySettings(model_dir=Path("models/anomaly"))
    models: ModelWatcher[AnomalyModel] = ModelWatcher("anomaly", settings.model_dir, load_anomaly_model,
                                                      poll_s=3600)
    proc = AnomalyProcessor(settings, offline_sink("anomaly", recorder), models)
    return await _drain(proc._handle, proc.sink, records, proc.stream.batch_max)


async def _drain(handle: Any, sink: Any, records: list[Any], size: int) -> float:
    batches = list(batches_of(records, size))
    gc.collect()
    start = time.process_time()
    for batch in batches:
        await handle(batch)
        await sink.push()
    return time.process_time() - start


STAGES = {"features": (_features, Topic.NODESTATE, "nodestate.bin"),
          "regime": (_regime, Topic.FEATURES, "featurevector.bin"),
          "anomaly": (_anomaly, Topic.FEATURES, "featurevector.bin")}


_RECORDER: list[_Recorder | None] = [None]


def _record_changelogs() -> None:
    """Changelog records go through ``Sink.changelog_many``: digest them too (the batching cost stays)."""
    from services.runtime.stream_io import Sink

    original = Sink.changelog_many

    async def changelog_many(self: Sink, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
        recorder = _RECORDER[-1]
        if recorder is not None:
            for partition, key, value in records:
                recorder.add(b"changelog%d" % partition, key, value, ())
        await original(self, topic, records)

    Sink.changelog_many = changelog_many  # type: ignore[method-assign]


# ------------------------------------------------------------------------------ commands


def record(out: Path, nodes: int, seconds: int) -> None:
    from contracts.headers import build_headers
    from loadtests.loadgen import build_pool
    from services.runtime.partitioning import default_partition

    _tracing()
    out.mkdir(parents=True, exist_ok=True)
    pool = build_pool(nodes, 11, "bst-", pool_ticks=min(48, seconds))
    headers = build_headers(Topic.NODESTATE)
    ts0 = 1_795_000_000_000
    partitions = list(range(PARTITIONS))
    inputs = [(default_partition(pool.keys[n], partitions), pool.keys[n], pool.message(n, s, ts0 + 1000 * s, s),
               headers, ts0 + 1000 * s) for s in range(seconds) for n in range(len(pool))]
    _write(out / "nodestate.bin", inputs)
    recorder = _Recorder()
    kept: list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]] = []

    class Keeping(_RecordingBatch):
        def append(self, *, key: bytes | None, value: bytes | None, timestamp: Any, headers: Any = None) -> Any:
            meta = super().append(key=key, value=value, timestamp=timestamp, headers=headers)
            if meta is not None and key is not None and value is not None and headers:
                ts = orjson.loads(value)["ts_ms"]
                kept.append((default_partition(key, partitions), key, value, list(headers), ts))
            return meta

    sink_recorder = recorder
    original = _OfflineProducer.create_batch
    _OfflineProducer.create_batch = lambda self: Keeping(self._real.create_batch(), sink_recorder)  # type: ignore[method-assign]
    try:
        asyncio.run(_features(_read(out / "nodestate.bin", Topic.NODESTATE), recorder))
    finally:
        _OfflineProducer.create_batch = original  # type: ignore[method-assign]
    _write(out / "featurevector.bin", kept)
    print(f"recorded {len(inputs)} NodeState, {len(kept)} FeatureVectors in {out}")


def run(stage: str, input_dir: Path, rounds: int, *, tune: bool = True) -> dict[str, Any]:
    fn, topic, name = STAGES[stage]
    records = _read(input_dir / name, topic)
    _tracing()
    _record_changelogs()
    if tune:  # as run_stream tunes every stage (GC thresholds, start-up objects frozen, malloc)
        from services.runtime.tuning import tune_process

        tune_process()
    # one round records what the stage writes (not timed: the recording costs CPU), then timed rounds
    recorder = _Recorder()
    _RECORDER.append(recorder)
    asyncio.run(fn(records, recorder))
    _RECORDER.append(None)
    times = [asyncio.run(fn(records, None)) for _ in range(rounds)]
    n = len(records)
    return {"bench": "stage_cpu", "case": stage, "messages": n, "written": recorder.count, "tuned": tune,
            "us_per_msg": round(statistics.median(times) / n * 1e6, 2) if times else None,
            "us_per_msg_runs": [round(t / n * 1e6, 1) for t in times],
            "digest": recorder.h.hexdigest()[:16]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--nodes", type=int, default=1000)
    rec.add_argument("--seconds", type=int, default=40)
    r = sub.add_parser("run")
    r.add_argument("--stage", choices=sorted(STAGES), required=True)
    r.add_argument("--input", type=Path, required=True)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--no-tune", action="store_true",
                   help="keep CPython's default GC thresholds (the figures before 2026-11-27 15:00 were taken so)")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        record(args.out, args.nodes, args.seconds)
    else:
        sys.stdout.write(orjson.dumps(run(args.stage, args.input, args.rounds, tune=not args.no_tune)).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
