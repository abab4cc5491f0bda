"""What shadow scoring costs the regime stage: CPU per window of ``RegimeProcessor.handle_batch``, in process.

``python -m loadtests.bench_shadow [--batches N] [--rounds R]`` scores the same simulated windows
(``training/regime/simwindows.py``) through the regime processor (shipped model, a sink that only
counts) in four set-ups, interleaved round by round so a busy host slows them alike, and prints
the median µs per window of each (process CPU time; the order rotates every round):

* ``before``: no rollout wiring at all (the processor as it was);
* ``no_candidate``: the wiring with no ``ROLLOUT.json`` (what every stage runs by default);
* ``shadow``: a candidate scored beside the current model on every window, served nowhere;
* ``step_50``: the candidate serving half the nodes (shadow continues on all).

No Kafka: the stage's I/O is the same in every set-up, so this isolates what the rollout adds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from contracts import FeatureVector
from contracts.topics import Topic
from featurelib.node.schema import node_feature_schema_hash
from services.regime.model import RegimeModel, load_regime_model
from services.regime.processor import RegimeProcessor
from services.regime.settings import RegimeSettings
from services.regime.shadow import RegimeShadow, RegimeShadowStats
from services.runtime import rollout
from services.runtime.model_watch import ModelWatcher
from services.runtime.rollout import RolloutState
from services.runtime.rollout_watch import RolloutWatcher
from training.regime.simwindows import simulate_windows

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "regime"
CURRENT, CANDIDATE = "20261126-232416-sim", "20261127-0228-sim-v24d4"


class CountingSink:
    def __init__(self) -> None:
        self.sent = 0

    async def send_encoded(self, base_topic: str, key: str, value: bytes, ctx: Any, **_: Any) -> None:
        self.sent += 1

    async def changelog(self, *args: Any) -> None:
        return None

    async def changelog_many(self, *args: Any) -> None:
        return None

    async def dead_letter(self, *args: Any) -> None:
        raise AssertionError("nothing should be dead-lettered")


def events(batches: int, size: int) -> list[list[Any]]:
    w = simulate_windows(kinds=None, nodes=size, ticks=10 * batches + 10, seed=5)
    schema = node_feature_schema_hash()
    out: list[Any] = []
    for i, (x, node, ts) in enumerate(zip(w.x, w.node, w.ts_ms, strict=True)):
        values = [0.0 if v != v else float(v) for v in x.tolist()]
        fv = FeatureVector(node=str(node), ts_ms=int(ts), window_s=10, schema_hash=schema, values=values,
                           valid=[v == v for v in x.tolist()], samples=10, input_ts_ms=int(ts))
        msg = SimpleNamespace(topic=Topic.FEATURES, partition=0, offset=i, key=str(node).encode(),
                              value=orjson.dumps(fv.model_dump(mode="json")), headers=[], timestamp=int(ts))
        out.append(SimpleNamespace(message=msg))
    return [out[i:i + size] for i in range(0, len(out) - size + 1, size)][:batches]


def processor(root: Path, mode: str) -> RegimeProcessor:
    settings = RegimeSettings(model_dir=root)
    models: ModelWatcher[RegimeModel] = ModelWatcher("regime", root, load_regime_model, poll_s=3600)
    if mode == "before":
        return RegimeProcessor(settings, CountingSink(), models)  # type: ignore[arg-type]
    stats = RegimeShadowStats()
    watcher = RolloutWatcher("regime", root, load_regime_model, stats, settings, serving=lambda: CURRENT)
    if mode != "no_candidate":
        rollout.write_state(root, RolloutState(kind="regime", candidate=CANDIDATE, baseline=CURRENT,
                                               status="shadow" if mode == "shadow" else "running",
                                               step=1, started_ms=1, step_started_ms=1, dwell_s=1e9))
    watcher.check()
    (root / rollout.STATE_FILE).unlink(missing_ok=True)
    return RegimeProcessor(settings, CountingSink(), models, watcher, RegimeShadow(stats, None))  # type: ignore[arg-type]


async def drain(proc: RegimeProcessor, batches: list[list[Any]]) -> float:
    # a fresh state per round: every window is new (not a replay) in every set-up
    proc.state.data.clear()
    proc.memory.clear()
    start = time.process_time()
    for batch in batches:
        await proc.handle_batch(batch)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", type=int, default=200, help="windows per batch (= simulated nodes)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="borg-bench-shadow-"))
    try:
        root = work / "regime"
        root.mkdir()
        for v in (CURRENT, CANDIDATE):
            shutil.copytree(SHIPPED / v, root / v)
        (root / "CURRENT").write_text(CURRENT + "\n")
        batches = events(args.batches, args.size)
        n = sum(len(b) for b in batches)
        modes = ("before", "no_candidate", "shadow", "step_50")
        procs = {m: processor(root, m) for m in modes}
        times: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for m in modes[r % len(modes):] + modes[:r % len(modes)]:  # no set-up always runs first
                gc.collect()
                times[m].append(asyncio.run(drain(procs[m], batches)))
        base = statistics.median(times["before"])
        for m in modes:
            t = statistics.median(times[m])
            q1, _, q3 = statistics.quantiles(times[m], n=4)
            print(orjson.dumps({"bench": "shadow", "case": m, "windows": n, "us_per_window": round(t / n * 1e6, 1),
                                "us_per_window_iqr": [round(q1 / n * 1e6, 1), round(q3 / n * 1e6, 1)],
                                "vs_before": round(t / base, 3)}).decode())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
