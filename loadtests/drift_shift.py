"""The counter-shift scenario of the drift stage, and its detection delay measured offline.

``traffic`` builds the FeatureVectors the integration test (tests/integration/test_drift_stage.py)
produces to Kafka: simulated nodes running the regime model's training kinds at 1 Hz; from
``shift_at`` seconds on, every other node's PMU reports instructions x0.5 and cache/LLC misses x3.

``python -m loadtests.drift_shift [--seeds 13 21 22] [--nodes 48 --ticks 1200 --shift-at 600]``
runs the same vectors through the shipped regime model (raw answers, as regimes.v2 carries them)
and the drift stage's window logic (``services/drift/window.py``, default settings, a report every
10 s of traffic) without Kafka, and prints per seed the highest score before the shift and the
detection delay in seconds of traffic (docs/drift.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contracts import FeatureVector
from contracts.models import UNKNOWN_REGIME
from featurelib.drift_profile import read_profile
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import FEATURE_INDEX, as_model_input, node_feature_schema_hash
from featurelib.node.windows import features_for_stream
from simulator import SyntheticCluster, holdout_split

ROOT = Path(__file__).resolve().parents[1]
START_MS = 1_700_000_000_000
FACTORS = {"instructions": 0.5, "cache-misses": 3.0, "LLC-load-misses": 3.0}


def shifted(state: dict[str, Any]) -> dict[str, Any]:
    counters = {}
    for name, c in state["counters"].items():
        factor = FACTORS.get(name)
        if factor is not None and c["value"] is not None:
            c = {**c, "value": c["value"] * factor, "raw": None if c["raw"] is None else c["raw"] * factor}
        counters[name] = c
    return {**state, "counters": counters}


def traffic(*, nodes: int, ticks: int, shift_at: int, seed: int) -> list[FeatureVector]:
    """FeatureVectors in event-time order; even-numbered nodes shifted from tick ``shift_at``."""
    train_kinds, _ = holdout_split(per_class=1, seed=7)  # the shipped regime model's training kinds
    sim = SyntheticCluster(nodes=nodes, seed=seed, workloads=list(train_kinds), start_ms=START_MS)
    states = []
    for batch in sim.run(ticks):
        for i, state in enumerate(batch.nodestate_dicts()):
            states.append(shifted(state) if batch.tick >= shift_at and i % 2 == 0 else state)
    schema = node_feature_schema_hash()
    windows = sorted(features_for_stream([sample_from_dict(s) for s in states]), key=lambda w: (w.ts_ms, w.node))
    return [FeatureVector(node=w.node, ts_ms=w.ts_ms, window_s=10, schema_hash=schema, values=w.values,
                          valid=w.valid, samples=w.samples, input_ts_ms=w.input_ts_ms) for w in windows]


def measure(vectors: list[FeatureVector], shift_ms: int, version_dir: Path,
            report_every_ms: int = 10_000) -> tuple[float | None, float]:
    """(detection delay in s of traffic or None, highest data score before the shift) with default settings."""
    from services.drift.settings import DriftSettings
    from services.drift.window import DriftMonitor
    from services.regime.model import load_regime_model

    settings = DriftSettings()
    profile = read_profile(version_dir)
    model = load_regime_model(version_dir)
    x = np.stack([as_model_input(v.values, v.valid) for v in vectors])
    ts = np.array([v.ts_ms for v in vectors], dtype=np.int64)
    probs, _ = model(x)
    mask, _ = model.judge(x, probs)
    answers = np.where(mask == 0, np.asarray(model.regimes, dtype=object)[probs.argmax(axis=1)], UNKNOWN_REGIME)
    cols = np.array([FEATURE_INDEX[n] for n in profile.feature_names()])
    monitor = DriftMonitor(profile, round(settings.window_s * 1000), settings.thresholds())
    next_ms, worst_before = 0, 0.0
    for i in range(len(vectors)):
        monitor.add_inputs(ts[i:i + 1], x[i:i + 1, cols])
        monitor.add_answer(int(ts[i]), str(answers[i]))
        if ts[i] < next_ms:
            continue
        next_ms = int(ts[i]) + report_every_ms
        verdict = monitor.evaluate()
        if ts[i] < shift_ms:
            worst_before = max(worst_before, verdict.data_score or 0.0)
        elif verdict.status == "drift":
            return (int(ts[i]) - shift_ms) / 1000, worst_before
    return None, worst_before


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtests.drift_shift", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[13, 21, 22])
    p.add_argument("--nodes", type=int, default=48)
    p.add_argument("--ticks", type=int, default=1200)
    p.add_argument("--shift-at", type=int, default=600)
    p.add_argument("--model-dir", type=Path, default=ROOT / "models" / "regime")
    args = p.parse_args(list(argv) if argv is not None else None)
    version_dir = args.model_dir / (args.model_dir / "CURRENT").read_text().strip()
    for seed in args.seeds:
        vectors = traffic(nodes=args.nodes, ticks=args.ticks, shift_at=args.shift_at, seed=seed)
        delay, worst = measure(vectors, START_MS + args.shift_at * 1000, version_dir)
        print(f"seed {seed}: highest data score before the shift {worst:.3f}; detection delay "
              + ("none (not detected)" if delay is None else f"{delay:.0f} s of traffic"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
