"""``borgctl eval drift [--quick] --out DIR``: the continuous-learning loop end to end on the real broker.

A private topic prefix, a temporary model root (a copy of ``models/regime`` with its ``CURRENT``)
and real ``regime`` (with the truth side channel, ``REGIME_TRUTH_FILE``) and ``drift`` processes.
Traffic: simulated nodes at 1 Hz, the features stage's windows computed by ``featurelib`` (as
``loadtests/drift_shift.py`` does) and produced to features.v1 in 30 s chunks of event time.

1. **Shift**: until ``shift_at`` every node runs the shipped regime model's training kinds; from then
   on every other node runs only the held-out kinds (``holdout_split(per_class=1, seed=7)``: kinds
   the model never saw), on the same hardware (same simulator seed, shifted nodes drawn first).
2. **Detection**: the first regime ``drift`` report on drift.v1 at or after the shift; the delay is in
   seconds of traffic (event time). No detection before ``retrain_at``: the loop is broken (exit 1).
3. **Retrain**: ``borgctl train regime --from-topics --truth T`` (``Plan.train_args``; not ``--quick``, whose
   candidate the stage rolled back: docs/drift.md) on the recorded topic; ``T`` holds only the
   post-shift ground truth ``[shift_at, retrain_at)``, so only those windows train.
4. **Accuracy before/after**: the current and the candidate model score the same labelled windows of
   the shifted nodes (the new kinds) from later traffic, ending at least ``gap`` after ``retrain_at``
   (no input sample shared with a training window); raw answers as regimes.v2 carries them, an
   abstention counts as not correct (``accuracy_*``), coverage and accuracy-when-answering are reported too.
5. **Rollout**: ``borgctl model promote --progressive`` of the candidate with a short dwell while later
   traffic (with truth) flows; the regime stage's shadow judges it → ``good_candidate_promoted`` only if
   the stage promoted it. Then a deliberately bad candidate (the served version with its card's regime
   names reversed) → ``bad_candidate_rolled_back`` only if rolled back before 100 %.

Writes ``DIR/drift.json`` (bench format), ``DIR/drift_timeline.png`` and ``DIR/logs``. Exit 0 when the
drift was detected, the good candidate promoted and the bad one rolled back; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from contracts import FeatureVector
from contracts.models import DriftReport, RolloutEvent
from contracts.topics import Topic
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import as_model_input, node_feature_schema_hash
from featurelib.node.windows import features_for_stream
from loadtests.bench_format import Result, write_results
from loadtests.procs import ROOT, Pipeline
from simulator import SyntheticCluster, holdout_split

START_MS = 1_700_000_000_000
CHUNK_MS = 30_000
BAD = "bad-permuted"


@dataclass(frozen=True)
class Plan:
    nodes: int
    shift_at: int
    retrain_at: int
    ticks: int
    gap_s: int = 300
    """Evaluation windows end this long after ``retrain_at`` (the longest feature window)."""
    dwell_s: float = 2.0
    min_samples: int = 300
    """Labelled windows a rollout judgement needs (``REGIME_ROLLOUT_MIN_SAMPLES``)."""
    seed: int = 13
    train_args: tuple[str, ...] = ("--train-fraction", "0.8", "--gap-s", "60")
    """How ``borgctl train regime --from-topics`` is run on the post-shift recording."""

    @property
    def shift_ms(self) -> int:
        return START_MS + self.shift_at * 1000


QUICK = Plan(nodes=64, shift_at=400, retrain_at=1500, ticks=2000, min_samples=300)
FULL = Plan(nodes=64, shift_at=600, retrain_at=2400, ticks=3000, dwell_s=10.0, min_samples=500)


@dataclass
class Recording:
    vectors: list[FeatureVector]
    truth: list[dict[str, Any]]
    shifted: frozenset[str]


def record(plan: Plan) -> Recording:
    """Windows (event-time order) and ground truth; the shifted nodes run held-out kinds from ``shift_at``."""
    train_kinds, new_kinds = holdout_split(per_class=1, seed=7)  # the shipped regime model's split
    names = [f"sim-{i:04d}" for i in range(plan.nodes)]
    shifted = names[::2]
    order = shifted + [n for n in names if n not in shifted]  # same seed, shifted first: same hardware in both
    before = SyntheticCluster(nodes=plan.nodes, seed=plan.seed, workloads=list(train_kinds), node_names=order,
                              start_ms=START_MS)
    after = SyntheticCluster(nodes=len(shifted), seed=plan.seed, workloads=list(new_kinds), node_names=shifted,
                             start_ms=plan.shift_ms)
    later = after.run(plan.ticks - plan.shift_at)
    states: list[dict[str, Any]] = []
    truth: list[dict[str, Any]] = []
    for batch in before.run(plan.ticks):
        rows, labels = batch.nodestate_dicts(), batch.truth_records()
        if batch.tick >= plan.shift_at:
            moved = next(later)
            rows = moved.nodestate_dicts(seq_offset=plan.shift_at) + rows[len(shifted):]
            labels = moved.truth_records() + labels[len(shifted):]
        states.extend(rows)
        truth.extend({"node": r["node"], "ts_ms": r["ts_ms"], "regime": r["regime"], "slowdown": r["slowdown"],
                      "co_runners": r["co_runners"]} for r in labels)
    schema = node_feature_schema_hash()
    windows = sorted(features_for_stream([sample_from_dict(s) for s in states]), key=lambda w: (w.ts_ms, w.node))
    vectors = [FeatureVector(node=w.node, ts_ms=w.ts_ms, window_s=10, schema_hash=schema, values=w.values,
                             valid=w.valid, samples=w.samples, input_ts_ms=w.input_ts_ms) for w in windows]
    return Recording(vectors, truth, frozenset(shifted))


def labels_of(vectors: Sequence[FeatureVector], truth: Sequence[dict[str, Any]]) -> list[str | None]:
    """The majority ground-truth regime of each window's last pane ``[ts - HOP, ts)``, as trainer and stage label it."""
    from featurelib.node.schema import HOP_MS

    by_node: dict[str, list[tuple[int, str]]] = {}
    for r in truth:
        by_node.setdefault(str(r["node"]), []).append((int(r["ts_ms"]), str(r["regime"])))
    stamps = {n: np.array(sorted(t for t, _ in ticks), dtype=np.int64) for n, ticks in by_node.items()}
    names = {n: [r for _, r in sorted(ticks)] for n, ticks in by_node.items()}
    out: list[str | None] = []
    for v in vectors:
        ts = stamps.get(v.node)
        if ts is None:
            out.append(None)
            continue
        lo, hi = int(np.searchsorted(ts, v.ts_ms - HOP_MS)), int(np.searchsorted(ts, v.ts_ms))
        out.append(Counter(names[v.node][lo:hi]).most_common(1)[0][0] if hi > lo else None)
    return out


def score(version_dir: Path, vectors: Sequence[FeatureVector], labels: Sequence[str]) -> dict[str, Any]:
    """Raw answers (abstention = ``unknown``) of one model version on labelled windows (``answers``: per
    window, for the matched-coverage comparison)."""
    from services.regime.model import load_regime_model
    from services.regime.shadow import answers
    from services.runtime.selective import Answers

    model = load_regime_model(version_dir)
    x = np.stack([as_model_input(v.values, v.valid) for v in vectors])
    probs, _ = model(x)
    said = answers(model, x, probs)
    truth = np.asarray(labels, dtype=object)
    answered = said != "unknown"
    correct = int((said[answered] == truth[answered]).sum())
    n, k = len(labels), int(answered.sum())
    return {"windows": n, "answered": k, "correct": correct, "accuracy": correct / n if n else math.nan,
            "coverage": k / n if n else math.nan, "accuracy_answered": correct / k if k else math.nan,
            "answers": Answers(answered, answered & (said == truth), probs.max(axis=1).astype(np.float64))}


def matched_scores(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The stage's rule offline: accuracy of both versions at the narrower one's coverage."""
    from services.runtime.selective import matched

    cur, cand, n = matched(before.pop("answers"), after.pop("answers"))
    return {"matched_windows": n, "accuracy_current": cur, "accuracy_candidate": cand}


def model_root(dest: Path) -> tuple[Path, str]:
    """A copy of the shipped regime root's CURRENT version, served from ``dest/regime``."""
    shipped = ROOT / "models" / "regime"
    served = (shipped / "CURRENT").read_text().strip()
    root = dest / "regime"
    root.mkdir(parents=True)
    shutil.copytree(shipped / served, root / served)
    (root / "CURRENT").write_text(served + "\n")
    return root, served


def make_bad(root: Path, base: str) -> None:
    """The served version with its card's regime names reversed: the same ONNX files, wrong labels."""
    shutil.copytree(root / base, root / BAD)
    card = orjson.loads((root / BAD / "model_card.json").read_bytes())
    card["version"] = BAD
    card["outputs"]["regimes"] = list(reversed(card["outputs"]["regimes"]))
    (root / BAD / "model_card.json").write_bytes(orjson.dumps(card))


@dataclass
class Feed:
    """Produces windows in 30 s chunks of event time, each chunk's truth appended to the stage's truth file first."""

    bootstrap: str
    prefix: str
    truth_file: Path
    producer: Any = None
    sent: int = 0
    passes: int = 0
    """Replays of the evaluation traffic, each later in event time."""

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer

        from services.runtime.kafka_security import kafka_client_options

        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True,
                                         **kafka_client_options())
        await self.producer.start()

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()

    async def send(self, vectors: Sequence[FeatureVector], truth: Sequence[dict[str, Any]], shift_ms: int = 0) -> None:
        from contracts import encode
        from contracts.headers import build_headers

        headers = build_headers(Topic.FEATURES)
        topic = self.prefix + Topic.FEATURES
        ticks = sorted(truth, key=lambda r: int(r["ts_ms"]))
        t = 0
        i = 0
        while i < len(vectors):
            end = vectors[i].ts_ms + CHUNK_MS
            j = i
            while j < len(vectors) and vectors[j].ts_ms < end:
                j += 1
            lines = []
            while t < len(ticks) and int(ticks[t]["ts_ms"]) < end:
                tick = ticks[t]  # what the stage reads: the other fields would only slow its tail down
                lines.append(orjson.dumps({"node": tick["node"], "ts_ms": int(tick["ts_ms"]) + shift_ms,
                                           "regime": tick["regime"]}) + b"\n")
                t += 1
            with self.truth_file.open("ab") as out:
                out.write(b"".join(lines))
            for v in vectors[i:j]:
                moved = v if not shift_ms else v.model_copy(update={"ts_ms": v.ts_ms + shift_ms,
                                                                     "input_ts_ms": v.input_ts_ms + shift_ms})
                await self.producer.send(topic, key=v.node.encode(), value=encode(moved), headers=headers)
            await self.producer.flush()
            self.sent += j - i
            i = j
            await asyncio.sleep(0.1)  # partitions stay within seconds of each other in event time, as live


@dataclass
class DriftWatch:
    """Every drift.v1 report and rollouts.v1 record of the run (a consumer from the beginning, no group)."""

    bootstrap: str
    prefix: str
    reports: list[DriftReport] = field(default_factory=list)
    rollouts: list[RolloutEvent] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer

        from contracts import decode
        from contracts.topics import DRIFT_TOPIC
        from services.runtime.kafka_security import kafka_client_options

        consumer = AIOKafkaConsumer(self.prefix + DRIFT_TOPIC, self.prefix + Topic.ROLLOUTS,
                                    bootstrap_servers=self.bootstrap, group_id=None, auto_offset_reset="earliest",
                                    enable_auto_commit=False, **kafka_client_options())
        await consumer.start()
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=300)
                for tp, msgs in batch.items():
                    if tp.topic.endswith(Topic.ROLLOUTS):
                        self.rollouts.extend(decode(RolloutEvent, m.value) for m in msgs if m.value is not None)
                    else:
                        self.reports.extend(decode(DriftReport, m.value) for m in msgs if m.value is not None)
        finally:
            await consumer.stop()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def regime(self) -> list[DriftReport]:
        return sorted((r for r in self.reports if r.model == "regime"), key=lambda r: r.ts_ms)


async def wait_for(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:.0f}s")
        await asyncio.sleep(0.3)


async def roll_out(root: Path, version: str, plan: Plan, feed: Feed, rec: Recording, pipeline: Pipeline,
                   timeout_s: float, say: Any) -> dict[str, Any]:
    """Start a progressive rollout and feed later traffic (replayed later in event time) until it ends."""
    from services.runtime import rollout

    eval_from = START_MS + plan.retrain_at * 1000
    vectors = [v for v in rec.vectors if v.ts_ms >= eval_from]
    truth = [r for r in rec.truth if int(r["ts_ms"]) >= eval_from - 10_000]
    span = (plan.ticks - plan.retrain_at) * 1000 + 10_000
    # what an operator types (a subprocess: loadtests do not import borgctl)
    cmd = [sys.executable, "-m", "borgctl.main", "model", "--models", str(root.parent), "promote", root.name, version,
           "--progressive", "--dwell", str(plan.dwell_s)]
    done = await asyncio.to_thread(subprocess.run, cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"borgctl model promote --progressive {version} exited {done.returncode}: {done.stderr}")
    say(f"rollout of {version}: {done.stdout.strip()}")
    started = time.monotonic()
    while True:
        state = rollout.read_state(root)
        if state is not None and state.status in ("promoted", "rolled_back"):
            break
        pipeline.check_alive()
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"rollout of {version} still {state.status if state else '?'} after {timeout_s:.0f}s")
        await feed.send(vectors, truth, shift_ms=feed.passes * span)
        feed.passes += 1
        await asyncio.sleep(0.3)
    events = [e for e in rollout.read_events(root) if e.get("candidate") == version]
    say(f"rollout of {version}: {state.status} at step {state.step + 1}/{len(state.steps)} ({state.reason})")
    return {"status": state.status, "step": state.step + 1, "steps": len(state.steps), "fraction": state.fraction,
            "reason": state.reason, "events": events, "seconds": round(time.monotonic() - started, 1)}


def train_candidate(root: Path, truth_file: Path, bootstrap: str, prefix: str, version: str, log: Path,
                    extra: Sequence[str]) -> int:
    """``borgctl train regime --from-topics`` as an operator (or the trainer service) runs it."""
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "BORG_TOPIC_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "borgctl.main", "train", "regime", "--from-topics", "--truth", str(truth_file),
           "--out", str(root), "--version", version, *extra]
    with log.open("ab") as out:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode


def plot(path: Path, plan: Plan, reports: Sequence[DriftReport], detected_ms: int | None,
         rollouts: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5))
    claims = [r for r in reports if r.data_score is not None]
    top.plot([(r.ts_ms - START_MS) / 1000 for r in claims], [r.data_score for r in claims], ".-", label="data score")
    if claims:
        top.axhline(claims[0].data_threshold, color="grey", ls=":", label="threshold")
    top.axvline(plan.shift_at, color="tab:red", ls="--", label="shift (new kinds on half the nodes)")
    if detected_ms is not None:
        top.axvline((detected_ms - START_MS) / 1000, color="tab:green", label="drift.v1 says drift")
    top.axvline(plan.retrain_at, color="tab:purple", ls="-.", label="retrain from the topics")
    top.axvspan(plan.retrain_at, max([plan.ticks, *[(r.ts_ms - START_MS) / 1000 for r in claims]]), color="grey",
                alpha=0.1, label="later traffic, replayed during the rollouts (the promoted version's profile after)")
    top.set_xlabel("traffic time (s of 1 Hz event time)")
    top.set_ylabel("regime data score (mean PSI)")
    top.legend(fontsize=8)
    offset = 0.0
    for name, ro in rollouts.items():
        events = ro.get("events") or []
        if not events:
            continue
        t0 = events[0]["ts_ms"]
        xs, ys = [], []
        for e in events:
            xs.append(offset + (e["ts_ms"] - t0) / 1000)
            ys.append({"promoted": 100.0, "rolled_back": 0.0}.get(e["status"], 100 * e["fraction"]))
        bottom.step(xs, ys, where="post", marker="o", label=f"{name}: {ro['status']} at step {ro['step']}")
        offset = xs[-1] + 1
    bottom.set_xlabel("wall seconds since the first rollout started")
    bottom.set_ylabel("nodes served by the candidate (%)")
    bottom.set_ylim(-5, 105)
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def run(plan: Plan, out: Path, bootstrap: str, say: Any) -> dict[str, Any]:
    from loadtests.procs import delete_topics
    from services.runtime.admin import create_topics

    work = out / "work"
    started = time.monotonic()
    root, served = model_root(work / "models")
    truth_file = work / "truth.jsonl"
    truth_file.touch()
    prefix = f"evaldrift{uuid.uuid4().hex[:8]}-"
    pipeline = Pipeline(bootstrap, prefix, out, extra_env={
        "REGIME_MODEL_DIR": str(root), "REGIME_TRUTH_FILE": str(truth_file), "REGIME_ROLLOUT_POLL_S": "0.3",
        "REGIME_ROLLOUT_MIN_SAMPLES": str(plan.min_samples), "DRIFT_REGIME_MODEL_DIR": str(root),
        "DRIFT_REPORT_EVERY_S": "10", "MODEL_POLL_S": "0.5", "STREAM_BATCH_MAX": "300", "LOG_LEVEL": "INFO"})
    feed = Feed(bootstrap, prefix, truth_file)
    watch = DriftWatch(bootstrap, prefix)
    result: dict[str, Any] = {"plan": plan.__dict__, "served": served, "prefix": prefix}
    try:
        await create_topics(bootstrap, prefix=prefix)
        pipeline.start(["regime", "drift"])
        # the traffic is computed while the stages start (both take tens of seconds on a busy box)
        rec, _ = await asyncio.gather(asyncio.to_thread(record, plan), pipeline.wait_ready(180))
        say(f"traffic: {plan.nodes} nodes x {plan.ticks} s at 1 Hz ({len(rec.vectors):,} windows); from "
            f"{plan.shift_at} s {len(rec.shifted)} nodes run held-out kinds only")
        await feed.start()
        watch.start()
        retrain_ms = START_MS + plan.retrain_at * 1000
        await feed.send([v for v in rec.vectors if v.ts_ms < retrain_ms],
                        [r for r in rec.truth if int(r["ts_ms"]) < retrain_ms])
        last = max(v.ts_ms for v in rec.vectors if v.ts_ms < retrain_ms)
        await wait_for(lambda: any(r.ts_ms >= last - 20_000 for r in watch.regime()), 120,
                       "drift.v1 report on the end of the pre-retraining traffic")
        reports = watch.regime()
        drifted = [r for r in reports if r.ts_ms >= plan.shift_ms and r.status == "drift"]
        false_alarms = [r for r in reports if r.ts_ms < plan.shift_ms and r.status == "drift"]
        detected_ms = drifted[0].ts_ms if drifted else None
        result["detection_delay_s"] = None if detected_ms is None else (detected_ms - plan.shift_ms) / 1000
        result["false_alarms_before_shift"] = len(false_alarms)
        result["first_drift_reasons"] = drifted[0].reasons if drifted else []
        result["reports"] = [{"t_s": (r.ts_ms - START_MS) / 1000, "status": r.status, "data_score": r.data_score,
                              "prediction_psi": r.prediction_psi, "version": r.model_version} for r in reports]
        say("detection: " + ("none before retraining" if detected_ms is None else
                             f"{result['detection_delay_s']:.0f} s of traffic after the shift ({drifted[0].reasons})"))

        # retrain on what the topic recorded; ground truth of the post-shift ticks only
        retrain_truth = work / "truth_post_shift.jsonl"
        retrain_truth.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rec.truth
                                           if plan.shift_ms <= int(r["ts_ms"]) < retrain_ms))
        candidate = "drift-retrained"
        t0 = time.monotonic()
        code = await asyncio.to_thread(train_candidate, root, retrain_truth, bootstrap, prefix, candidate,
                                       out / "logs" / "train.log", plan.train_args)
        result["retrain_seconds"] = round(time.monotonic() - t0, 1)
        if code != 0:
            raise RuntimeError(f"borgctl train regime --from-topics exited {code} (see {out / 'logs' / 'train.log'})")
        say(f"retrained {candidate} from the topics in {result['retrain_seconds']} s")

        # the same later, labelled windows of the shifted nodes scored by both versions
        eval_from = retrain_ms + plan.gap_s * 1000
        evw = [v for v in rec.vectors if v.ts_ms >= eval_from and v.node in rec.shifted]
        labels = labels_of(evw, rec.truth)
        pairs = [(v, lab) for v, lab in zip(evw, labels, strict=True) if lab is not None]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        result["before"] = score(root / served, xs, ys)
        result["after"] = score(root / candidate, xs, ys)
        result["matched_coverage"] = matched_scores(result["before"], result["after"])
        m = result["matched_coverage"]
        say(f"new kinds, {len(xs)} later windows: accuracy {result['before']['accuracy']:.3f} ({served}) -> "
            f"{result['after']['accuracy']:.3f} ({candidate}); at matched coverage {m['accuracy_current']:.3f} -> "
            f"{m['accuracy_candidate']:.3f} over {m['matched_windows']} answers")

        rollouts: dict[str, dict[str, Any]] = {}
        rollouts["good"] = await roll_out(root, candidate, plan, feed, rec, pipeline, 180, say)
        make_bad(root, (root / "CURRENT").read_text().strip())
        rollouts["bad"] = await roll_out(root, BAD, plan, feed, rec, pipeline, 180, say)
        result["rollouts"] = rollouts
        # the stage's record of both rollouts on rollouts.v1 (published right after the poll that decided)
        with contextlib.suppress(TimeoutError):
            await wait_for(lambda: any(e.candidate == BAD and e.status in ("rolled_back", "promoted")
                                       for e in watch.rollouts), 15, "rollouts.v1 record of the bad candidate")
        result["rollout_events"] = [{"candidate": e.candidate, "origin": e.origin, "status": e.status,
                                     "step": e.step, "fraction": e.fraction, "reason": e.reason}
                                    for e in watch.rollouts]
        result["current_after"] = (root / "CURRENT").read_text().strip()
        good, bad = rollouts["good"], rollouts["bad"]
        result["good_candidate_promoted"] = int(good["status"] == "promoted" and result["current_after"] != served
                                                 and (root / "CURRENT.history").read_text().splitlines()[0] == served)
        result["bad_candidate_rolled_back"] = int(bad["status"] == "rolled_back" and bad["step"] < bad["steps"]
                                                   and result["current_after"] != BAD)
        plot(out / "drift_timeline.png", plan, watch.regime(), detected_ms, rollouts)
    finally:
        await watch.stop()
        await feed.stop()
        codes = pipeline.stop()
        result["exit_codes"] = codes
        with contextlib.suppress(Exception):
            await delete_topics(bootstrap, prefix)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def bench_rows(result: dict[str, Any], case: str) -> list[dict[str, Any]]:
    def row(metric: str, value: float | None, unit: str) -> dict[str, Any]:
        return Result("drift", case, metric, math.nan if value is None else float(value), unit).row()

    return [row("detection_delay_s", result.get("detection_delay_s"), "s"),
            row("accuracy_before", result.get("before", {}).get("accuracy"), "ratio"),
            row("accuracy_after", result.get("after", {}).get("accuracy"), "ratio"),
            row("bad_candidate_rolled_back", result.get("bad_candidate_rolled_back", 0), "bool"),
            row("good_candidate_promoted", result.get("good_candidate_promoted", 0), "bool")]


def main(argv: Sequence[str] | None = None) -> int:
    import dataclasses

    p = argparse.ArgumentParser(prog="borgctl eval drift", description=__doc__.splitlines()[0])
    p.add_argument("--plan", type=orjson.loads, default=None, help=argparse.SUPPRESS)  # experiments: Plan fields
    p.add_argument("--quick", action="store_true", help=f"{QUICK.nodes} nodes, {QUICK.ticks} s of traffic (tests)")
    p.add_argument("--out", type=Path, required=True, help="results directory")
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    args = p.parse_args(list(argv) if argv is not None else None)
    plan = QUICK if args.quick else FULL
    if args.plan:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in args.plan.items()}
        plan = dataclasses.replace(plan, **fields)
    work = args.out / "work"  # the model root and truth files of the run (rewritten each run)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)

    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"eval drift [{time.monotonic() - t0:5.1f}s]: {msg}", flush=True)

    # SIGTERM as Ctrl-C: the stages are stopped and the scratch topics deleted on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        result = asyncio.run(run(plan, args.out, args.bootstrap, say))
    except KeyboardInterrupt:
        return 130
    except (TimeoutError, RuntimeError) as exc:
        say(f"the loop broke: {exc}")
        (args.out / "drift_details.json").write_bytes(orjson.dumps({"error": str(exc)}))
        return 1
    case = "quick" if args.quick else "full"
    write_results(args.out / "drift.json", bench_rows(result, case))
    (args.out / "drift_details.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2
                                                                | orjson.OPT_SERIALIZE_NUMPY, default=str))
    delay = result.get("detection_delay_s")
    ok = (delay is not None and result["good_candidate_promoted"] == 1 and result["bad_candidate_rolled_back"] == 1)
    say(f"detection_delay_s={delay} accuracy_before={result['before']['accuracy']:.3f} "
        f"accuracy_after={result['after']['accuracy']:.3f} good_candidate_promoted={result['good_candidate_promoted']} "
        f"bad_candidate_rolled_back={result['bad_candidate_rolled_back']} ({result['seconds']} s; {args.out})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
