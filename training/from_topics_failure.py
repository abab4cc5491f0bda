"""``borgctl train failure --from-topics [taskevents.v1]``: a failure-risk candidate from recorded task events.

The task lifecycle recorded on taskevents.v1 holds both the inputs (each task's, job's, machine's
and user's history) and the outcomes (FAIL / EVICT / KILL / FINISH after each prediction point).
The records are written out as one Google-2011-format part file (time, job, task, machine, event
type, user, class, priority, requests), on the Borg scale the risk stage scores with
(``featurelib/borg_units.py``: Kubernetes requests divided by the largest node's allocatable,
``--largest-node-cpu`` / ``--largest-node-memory-gib`` as ``RISK_LARGEST_NODE_*``; a field it cannot
place is left empty = missing, as the risk stage does), and the offline trainer
(``training/train.py``) runs on it unchanged: the same prediction points, censoring, time split
with a gap of the longest horizon, tail calibration and ONNX parity check. Time: a replayed
trace's original ``trace_time_us`` when every record has one, else event time from the first
record + 600 s (the trace's convention: time 0 holds the tasks already running).
Duplicates (at-least-once delivery) are dropped. ``CURRENT`` is not moved.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.codec import ContractError, decode
from contracts.models import TaskEvent
from contracts.topics import Topic
from featurelib.borg_units import LargestNode, task_units
from training.errors import DataError, IngestError
from training.from_topics import FromTopicsError, read_topic, record_run
from training.progress import Progress
from training.synthetic_trace import TRACE_START_US

ROOT = Path(__file__).resolve().parents[1]
EVENT_CODE = {"SUBMIT": 0, "SCHEDULE": 1, "EVICT": 2, "FAIL": 3, "FINISH": 4, "KILL": 5, "LOST": 6,
              "UPDATE_PENDING": 7, "UPDATE_RUNNING": 8}
PART = "part-00000-of-00001.csv"
MIN_FAILURES = 20
MIN_SPAN_S = 4 * 3600
"""An hour of warm-up, a training window, an hour of gap and a test window: less cannot be split."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="borgctl train failure --from-topics", description=__doc__.splitlines()[0])
    p.add_argument("--from-topics", nargs="?", const=Topic.TASKEVENTS, default=Topic.TASKEVENTS,
                   help="the task events topic (default taskevents.v1; BORG_TOPIC_PREFIX applies)")
    p.add_argument("--out", type=Path, default=ROOT / "models" / "failure", help="model root (default models/failure)")
    p.add_argument("--version", help="candidate version name (default: UTC time + data fingerprint)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--horizons", default="300,900,3600")
    p.add_argument("--largest-node-cpu", type=float, default=None, help="cores (Kubernetes events)")
    p.add_argument("--largest-node-memory-gib", type=float, default=None, help="GiB (Kubernetes events)")
    p.add_argument("--max-records", type=int, default=5_000_000)
    p.add_argument("--keep-csv", type=Path, default=None, help="also keep the part file written here")
    p.add_argument("--quick", action="store_true", help="accepted for symmetry: the recipe is the offline one")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


class _Ids:
    """Stable integers for names the 2011 format keeps as integers (job, machine)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, name: str | None, strip: str = "") -> int | None:
        if name is None:
            return None
        bare = name[len(strip):] if strip and name.startswith(strip) else name
        if bare.isdigit():
            return int(bare)
        return self.ids.setdefault(name, 10**12 + len(self.ids))  # beyond the trace's ids: no collision


def recorded_events(topic: str, limit: int, progress: Progress) -> tuple[list[TaskEvent], int]:
    seen: dict[tuple[str, int, str], TaskEvent] = {}
    skipped = 0
    for msg in read_topic(topic, limit=limit, progress=progress):
        try:
            event = decode(TaskEvent, msg.value)
        except ContractError:
            skipped += 1
            continue
        assert isinstance(event, TaskEvent)
        seen[(event.task_id, event.ts_ms, event.event)] = event
    return sorted(seen.values(), key=lambda e: (e.ts_ms, EVENT_CODE[e.event])), skipped


def check_enough(events: Sequence[TaskEvent], topic: str) -> None:
    """Refuse a recording the offline recipe cannot split or learn from (it would fit a constant)."""
    failures = sum(1 for e in events if e.event == "FAIL")
    span_s = (max(e.ts_ms for e in events) - min(e.ts_ms for e in events)) / 1000 if events else 0.0
    if len(events) < 100 or failures < MIN_FAILURES or span_s < MIN_SPAN_S:
        raise FromTopicsError(f"{topic} holds {len(events)} task events, {failures} FAIL, over {span_s / 3600:.1f} h: "
                              f"retraining needs at least {MIN_FAILURES} FAIL events over {MIN_SPAN_S // 3600} h")


def write_part(events: Sequence[TaskEvent], out_dir: Path, largest: LargestNode) -> dict[str, Any]:
    """The events as a 2011 task_events part file in ``out_dir``; returns how times and units were mapped."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace_times = all(e.trace_time_us is not None for e in events)
    t0 = events[0].ts_ms if events else 0
    jobs, machines = _Ids(), _Ids()
    unmapped = 0
    with (out_dir / PART).open("w", newline="") as f:
        w = csv.writer(f)
        for e in events:
            u = task_units(source=e.source, cpu_request=e.cpu_request, memory_request=e.memory_request,
                           disk_request=e.disk_request, priority=e.priority, scheduling_class=e.scheduling_class,
                           largest=largest)
            unmapped += bool(u.unmapped)
            time_us = e.trace_time_us if trace_times and e.trace_time_us is not None \
                else (e.ts_ms - t0) * 1000 + TRACE_START_US
            w.writerow([time_us, int(e.missing_info), jobs(e.job_id), e.task_index, _opt(machines(e.machine, "m")),
                        EVENT_CODE[e.event], e.user or "", _opt(u.scheduling_class), _opt(u.priority),
                        _opt(u.cpu_request), _opt(u.memory_request), _opt(u.disk_request),
                        _opt(None if e.different_machines_restriction is None
                             else int(e.different_machines_restriction))])
    return {"time": "trace_time_us" if trace_times else "ts_ms - first + 600 s", "events": len(events),
            "events_with_unmapped_fields": unmapped, "jobs_renumbered": len(jobs.ids),
            "machines_renumbered": len(machines.ids)}


def _opt(v: object) -> str:
    return "" if v is None else str(v)


def train_failure_from_topics(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    progress = Progress(enabled=not args.quiet)
    started = time.perf_counter()
    try:
        events, skipped = recorded_events(args.from_topics, args.max_records, progress)
        check_enough(events, args.from_topics)
        with tempfile.TemporaryDirectory(prefix="borg-from-topics-") as tmp:
            part_dir = args.keep_csv or Path(tmp) / "task_events"
            mapping = write_part(events, part_dir, LargestNode(args.largest_node_cpu, args.largest_node_memory_gib))
            progress(f"{len(events):,} task events ({skipped} unreadable) → {part_dir / PART} ({mapping['time']})")
            path = _train(args, part_dir, argv, progress)
    except (FromTopicsError, DataError, IngestError, FileExistsError) as exc:
        print(f"train failure: {exc}", file=sys.stderr)
        record_run(args.out, {"model": "failure", "ok": False, "error": str(exc), "ts": time.time()})
        return 2
    except RuntimeError as exc:  # the ONNX parity check
        print(f"train failure: {exc}", file=sys.stderr)
        record_run(args.out, {"model": "failure", "ok": False, "error": str(exc), "ts": time.time()})
        return 1
    served = (args.out / "CURRENT").read_text().strip() if (args.out / "CURRENT").is_file() else None
    progress(f"wrote candidate {path} (CURRENT still {served}; promote: borgctl model promote failure {path.name})")
    record_run(args.out, {"model": "failure", "ok": True, "version": path.name, "path": str(path), "served": served,
                          "events": len(events), **_figures(path), "seconds": round(time.perf_counter() - started, 1),
                          "ts": time.time()})
    return 0


def _train(args: argparse.Namespace, part_dir: Path, argv: Sequence[str], progress: Progress) -> Path:
    from training.cli import _horizons
    from training.train import TrainConfig, train_failure_models

    cfg = TrainConfig(task_events=part_dir, job_events=None, out=args.out, horizons_us=_horizons(args.horizons),
                      seed=args.seed, version=args.version, set_current=False,
                      command="borgctl train failure " + shlex.join(list(argv)))
    return train_failure_models(cfg, progress)


def _figures(version_dir: Path) -> dict[str, Any]:
    import orjson

    card = orjson.loads((version_dir / "model_card.json").read_bytes())
    horizons = (card.get("metrics") or {}).get("horizons") or {}
    return {f"aucpr_{h}": (m.get("model") or {}).get("aucpr") for h, m in horizons.items()}
