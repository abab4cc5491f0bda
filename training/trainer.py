"""``borgctl trainer``: retrain a model from the topics on a schedule or when drift.v1 says so, one run at a time.

Each run is ``python -m training.from_topics <model> --from-topics … [train args]`` in a child process
(its progress lines go to this process's output): it writes a candidate version beside the current one
and never moves ``CURRENT``. Runs are serialised by an exclusive ``flock`` on
``<models>/<model>/.trainer.lock``: a second trainer (another replica, the CronJob overlapping the
compose service, an operator's ``--once``) finds it held and skips, saying so. Visible state:

* ``<models>/<model>/trainer_status.json``: ``idle`` / ``running``, the trigger (``schedule``,
  ``drift``, ``once``), start and end times, the exit code and the last run's result;
* ``<models>/<model>/trainer_runs.jsonl``: one line per run (version, figures, or the error);
* log lines ``trainer: …`` and the training's own progress lines.

Modes: ``--once`` (what the Kubernetes CronJob runs) trains now and exits with the training's code
(0 when another run holds the lock). Without it the trainer stays up (compose profile ``trainer``):
it trains every ``--every-s`` seconds (0 = never on a clock) and, with ``--on-drift``, when a drift.v1
report for the model says ``drift`` and ``--cooldown-s`` have passed since the last run; it serves
``/healthz`` and ``/readyz`` on ``HEALTH_PORT`` (default 8080) meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import orjson
from aiokafka import AIOKafkaConsumer
from prometheus_client import Counter, Gauge

from contracts.codec import ContractError, decode
from contracts.models import DriftReport
from contracts.topics import DRIFT_TOPIC
from services.runtime.health import HealthServer
from services.runtime.kafka_security import kafka_client_options
from services.runtime.pause import pause
from training.from_topics import RUNS_FILE, bootstrap, prefix

log = logging.getLogger("trainer")
ROOT = Path(__file__).resolve().parents[1]
LOCK_FILE = ".trainer.lock"
STATUS_FILE = "trainer_status.json"
RUNNING = Gauge("borg_trainer_running", "1 while a training run of the model is under way", ["model"])
RUNS = Counter("borg_trainer_runs_total", "Training runs by trigger and outcome (ok, failed, skipped)",
               ["model", "trigger", "outcome"])
LAST_OK = Gauge("borg_trainer_last_success_timestamp_seconds", "When the last run wrote a candidate", ["model"])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="borgctl trainer", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("regime", "failure"), required=True)
    p.add_argument("--models", type=Path, default=Path(os.environ.get("BORG_MODELS_DIR", ROOT / "models")),
                   help="model roots (default models/, or BORG_MODELS_DIR)")
    p.add_argument("--seed-from", type=Path, default=None,
                   help="model roots to copy <model>/ from when --models has no <model>/CURRENT yet (a fresh volume)")
    p.add_argument("--once", action="store_true", help="one run now, then exit (the CronJob)")
    p.add_argument("--every-s", type=float, default=86_400.0, help="train this often (0: only on drift)")
    p.add_argument("--on-drift", action="store_true", help="also train when drift.v1 reports drift for the model")
    p.add_argument("--cooldown-s", type=float, default=3600.0, help="at least this long between drift-triggered runs")
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="after --: passed to `borgctl train <model> --from-topics` (e.g. --truth FILE --quick)")
    return p


@contextlib.contextmanager
def exclusive(root: Path) -> Iterator[bool]:
    """True while this process holds ``root/.trainer.lock``; False (at once) when another run holds it."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK_FILE).open("a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()} {time.time():.0f}\n")
            f.flush()
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def seed(root: Path, source: Path | None) -> None:
    """A fresh models volume gets the image's versions of the model (the regime retrain starts from CURRENT)."""
    if source is None or (root / "CURRENT").exists() or not (source / root.name / "CURRENT").exists():
        return
    shutil.copytree(source / root.name, root, dirs_exist_ok=True)
    log.info("trainer: seeded %s from %s", root, source / root.name)


def write_status(root: Path, **status: Any) -> None:
    tmp = root / f".{STATUS_FILE}.{os.getpid()}.tmp"
    tmp.write_bytes(orjson.dumps(status, option=orjson.OPT_INDENT_2) + b"\n")
    tmp.replace(root / STATUS_FILE)


def last_run(root: Path) -> dict[str, Any] | None:
    path = root / RUNS_FILE
    if not path.is_file():
        return None
    lines = path.read_bytes().splitlines()
    result: dict[str, Any] | None = orjson.loads(lines[-1]) if lines else None
    return result


async def train_once(model: str, root: Path, train_args: Sequence[str], trigger: str,
                     stdout: IO[bytes] | None = None) -> int | None:
    """One training run under the lock; None when another run holds it."""
    args = [a for a in train_args if a != "--"]
    with exclusive(root) as mine:
        if not mine:
            log.warning("trainer: %s: another training run holds %s; skipped", model, root / LOCK_FILE)
            RUNS.labels(model, trigger, "skipped").inc()
            return None
        started = time.time()
        write_status(root, state="running", model=model, trigger=trigger, started=started, pid=os.getpid())
        command = [sys.executable, "-m", "training.from_topics", model, "--from-topics", *args, "--out", str(root)]
        log.info("trainer: %s: run started (trigger %s): %s", model, trigger, " ".join(command[2:]))
        RUNNING.labels(model).set(1)
        try:
            proc = await asyncio.create_subprocess_exec(*command, cwd=ROOT, stdout=stdout, stderr=None)
            code = await proc.wait()
        finally:
            RUNNING.labels(model).set(0)
        RUNS.labels(model, trigger, "ok" if code == 0 else "failed").inc()
        if code == 0:
            LAST_OK.labels(model).set(time.time())
        result = last_run(root)
        write_status(root, state="idle", model=model, trigger=trigger, started=started, finished=time.time(),
                     exit_code=code, result=result)
        log.info("trainer: %s: run finished with exit code %d in %.0fs: %s", model, code, time.time() - started,
                 orjson.dumps(result).decode() if result else "no result")
        return code


async def _drift_said_so(model: str, consumer: AIOKafkaConsumer) -> bool:
    batch = await consumer.getmany(timeout_ms=1000)
    for records in batch.values():
        for msg in records:
            try:
                report = decode(DriftReport, msg.value)
            except ContractError:
                continue
            assert isinstance(report, DriftReport)
            if report.model == model and report.status == "drift":
                log.info("trainer: drift.v1 says %s drifted (%s)", model, "; ".join(report.reasons[:2]))
                return True
    return False


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> None:
    root = args.models / args.model
    health = HealthServer(os.environ.get("HEALTH_HOST", "127.0.0.1"), int(os.environ.get("HEALTH_PORT", "8080")))
    await health.start()
    consumer: AIOKafkaConsumer | None = None
    if args.on_drift:
        consumer = AIOKafkaConsumer(prefix() + DRIFT_TOPIC, bootstrap_servers=bootstrap(), **kafka_client_options(),
                                    group_id=None, auto_offset_reset="latest", enable_auto_commit=False)
        await consumer.start()
    health.add_check("trainer", lambda: True)  # ready once it listens to drift.v1 (or needs nothing)
    log.info("trainer: %s: every %s, on drift %s (cooldown %.0fs); lock %s", args.model,
             f"{args.every_s:.0f}s" if args.every_s > 0 else "never", args.on_drift, args.cooldown_s,
             root / LOCK_FILE)
    last = time.monotonic()
    try:
        while not stop.is_set():
            due = args.every_s > 0 and time.monotonic() - last >= args.every_s
            trigger = "schedule" if due else ""
            if not due and consumer is not None and await _drift_said_so(args.model, consumer) \
                    and time.monotonic() - last >= args.cooldown_s:
                trigger = "drift"
            if trigger:
                await train_once(args.model, root, args.train_args, trigger)
                last = time.monotonic()
            elif consumer is None:
                await pause(stop, 1.0)
    finally:
        if consumer is not None:
            await consumer.stop()
        await health.stop()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(message)s")
    seed(args.models / args.model, args.seed_from)
    if args.once:
        code = asyncio.run(train_once(args.model, args.models / args.model, args.train_args, "once"))
        return 0 if code is None else code

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args, stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
