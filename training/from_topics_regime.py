"""``borgctl train regime --from-topics [features.v1] --truth FILE``: a regime candidate from recorded windows.

Inputs: the FeatureVectors on features.v1 (the windows the regime stage scored, computed by the
features stage itself: no train/serve skew) and the simulator's ground truth, which never travels
on a topic: ``borgctl replay --source synthetic --truth-out FILE`` writes it as JSONL (node,
ts_ms, regime, slowdown per class). A window ending at ``ts`` is labelled like the offline trainer
labels it (``training/regime/simwindows.py``): the majority ground-truth regime over the ticks of
its last pane ``[ts − 10 s, ts)``, and the mean slowdown there. Windows without ground truth
(real traffic) are not used.

Leakage rules (as offline): windows are split by time: the first ``--train-fraction`` of the
recorded span trains; windows ending more than ``--gap-s`` (default 300 s, the longest feature
window) after that boundary test, so no test window shares a sample with a training window;
duplicates (at-least-once delivery) are dropped. The candidate keeps the current version's inputs
(``features.used``) and confidence floor (not recalibrated: that needs the kind-grouped folds of
the offline trainer); the OOD section is refitted on the training windows; the drift reference
profile is the test windows (what the model will see live). ``CURRENT`` is not moved.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from contracts.codec import ContractError
from contracts.fast.featurevector import decode_feature_row
from contracts.models import REGIMES, WORKLOAD_CLASSES
from contracts.topics import Topic
from featurelib.drift_profile import write_profile
from featurelib.node.schema import (
    FEATURE_SCHEMA_VERSION,
    HOP_MS,
    N_FEATURES,
    NODE_FEATURE_NAMES,
    node_feature_schema_hash,
)
from services.regime.abstention import judge as judge_rules
from services.regime.model import load_regime_model
from training.drift_reference import regime_profile
from training.from_topics import FromTopicsError, read_topic, record_run
from training.progress import Progress
from training.regime.artifacts import INPUT_NAME, ParityError, VersionDir, new_version
from training.regime.calibrate import OOD_QUANTILE, ood_section, rules_of
from training.regime.model import classification_metrics, export_regime_models, fit_regime_models

ROOT = Path(__file__).resolve().parents[1]
REGIME_INDEX = {r: i for i, r in enumerate(REGIMES)}
MIN_TRAIN, MIN_TEST = 200, 50


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="borgctl train regime --from-topics", description=__doc__.splitlines()[0])
    p.add_argument("--from-topics", nargs="?", const=Topic.FEATURES, default=Topic.FEATURES,
                   help="the features topic (default features.v1; BORG_TOPIC_PREFIX applies)")
    p.add_argument("--truth", type=Path, required=True,
                   help="ground truth JSONL (borgctl replay --source synthetic --truth-out FILE)")
    p.add_argument("--out", type=Path, default=ROOT / "models" / "regime", help="model root (default models/regime)")
    p.add_argument("--version", help="candidate version name (default: UTC time + '-topics')")
    p.add_argument("--train-fraction", type=float, default=0.7)
    p.add_argument("--gap-s", type=float, default=300.0, help="test windows end this long after the boundary")
    p.add_argument("--trees", type=int, default=40)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-records", type=int, default=2_000_000)
    p.add_argument("--quick", action="store_true", help="fewer, shallower trees (tests, smoke runs)")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def load_truth(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per node: (tick times, regime index, slowdown per class), time-sorted."""
    rows: dict[str, list[tuple[int, int, list[float]]]] = {}
    try:
        with path.open("rb") as f:
            for line in f:
                if not line.strip():
                    continue
                r = orjson.loads(line)
                rows.setdefault(str(r["node"]), []).append(
                    (int(r["ts_ms"]), REGIME_INDEX[r["regime"]], [float(r["slowdown"][c]) for c in WORKLOAD_CLASSES]))
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise FromTopicsError(f"{path}: unreadable ground truth ({type(exc).__name__}: {exc})") from None
    out = {}
    for node, items in rows.items():
        items.sort(key=lambda r: r[0])
        out[node] = (np.array([r[0] for r in items], dtype=np.int64), np.array([r[1] for r in items]),
                     np.array([r[2] for r in items], dtype=np.float64).reshape(-1, len(WORKLOAD_CLASSES)))
    return out


def label_windows(nodes: Sequence[str], stamps: np.ndarray, truth: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(has truth, regime, mean slowdown) per window: the ticks of its last pane ``[ts − HOP, ts)``."""
    has = np.zeros(len(nodes), dtype=bool)
    regime = np.zeros(len(nodes), dtype=np.int64)
    slow = np.ones((len(nodes), len(WORKLOAD_CLASSES)))
    for i, (node, ts) in enumerate(zip(nodes, stamps.tolist(), strict=True)):
        t = truth.get(node)
        if t is None:
            continue
        lo, hi = np.searchsorted(t[0], ts - HOP_MS, side="left"), np.searchsorted(t[0], ts, side="left")
        if hi <= lo:
            continue
        has[i] = True
        regime[i] = Counter(t[1][lo:hi].tolist()).most_common(1)[0][0]
        slow[i] = t[2][lo:hi].mean(axis=0)
    return has, regime, slow


def recorded_windows(topic: str, limit: int, progress: Progress) -> tuple[list[str], np.ndarray, np.ndarray, int]:
    """(nodes, end times, float32 rows with NaN = invalid, records skipped) of this schema's windows, deduplicated."""
    schema = node_feature_schema_hash()
    seen: dict[tuple[str, int], np.ndarray] = {}
    skipped = 0
    for msg in read_topic(topic, limit=limit, progress=progress):
        try:
            row = decode_feature_row(msg.value)
        except ContractError:
            skipped += 1
            continue
        if row.schema_hash != schema:
            skipped += 1
            continue
        values = np.frombuffer(row.packed, dtype=np.float64).astype(np.float32)
        valid = np.frombuffer(row.mask, dtype=bool)
        if len(values) != N_FEATURES:
            skipped += 1
            continue
        seen[(row.node, row.ts_ms)] = np.where(valid, values, np.float32(np.nan))
    keys = sorted(seen, key=lambda k: (k[1], k[0]))
    x = np.stack([seen[k] for k in keys]) if keys else np.zeros((0, N_FEATURES), dtype=np.float32)
    return [k[0] for k in keys], np.array([k[1] for k in keys], dtype=np.int64), x, skipped


def run(args: argparse.Namespace, progress: Progress, command: str) -> dict[str, Any]:
    started = time.perf_counter()
    served = (args.out / "CURRENT").read_text().strip() if (args.out / "CURRENT").is_file() else ""
    if not served:
        raise FromTopicsError(f"{args.out}: no CURRENT version to retrain (train one offline first)")
    current = load_regime_model(args.out / served)
    used = list(current.card["features"]["used"])
    nodes, stamps, x, skipped = recorded_windows(args.from_topics, args.max_records, progress)
    has, regime, slowdown = label_windows(nodes, stamps, load_truth(args.truth))
    progress(f"windows: {len(nodes):,} recorded ({skipped} skipped: other schema or unreadable), "
             f"{int(has.sum()):,} with ground truth")
    x, regime, slowdown, stamps = x[has], regime[has], slowdown[has], stamps[has]
    if len(stamps) < MIN_TRAIN + MIN_TEST:
        raise FromTopicsError(f"only {len(stamps)} recorded windows with ground truth (need {MIN_TRAIN + MIN_TEST})")
    boundary = int(stamps.min() + args.train_fraction * (stamps.max() - stamps.min()))
    train = stamps <= boundary
    test = stamps > boundary + round(args.gap_s * 1000)
    if train.sum() < MIN_TRAIN or test.sum() < MIN_TEST:
        raise FromTopicsError(f"time split leaves {int(train.sum())} training and {int(test.sum())} test windows "
                              f"(need {MIN_TRAIN} and {MIN_TEST}): record longer")
    progress(f"time split: {int(train.sum()):,} training windows up to {boundary}, {int(test.sum()):,} test windows "
             f"after {boundary + round(args.gap_s * 1000)}")
    models = fit_regime_models(x[train], regime[train], slowdown[train], trees=args.trees, depth=args.depth,
                               seed=args.seed, feature_names=used)
    abstention: dict[str, Any] = dict(current.card.get("abstention") or {})
    abstention["out_of_distribution"] = ood_section(x[train], [n for n in abstention.get(
        "out_of_distribution", {}).get("features", []) if isinstance(n, str)] or used, OOD_QUANTILE)
    rules = rules_of(abstention)
    xt, yt = x[test], regime[test]
    probs = models.predict_proba(xt)
    metrics = {"candidate": classification_metrics(yt, probs.argmax(axis=1)),
               "current": classification_metrics(yt, current(xt)[0].argmax(axis=1))}
    for who in ("candidate", "current"):
        m = metrics[who]
        progress(f"test windows ({who}): accuracy {m['accuracy']:.3f}, macro F1 {m['macro_f1']:.3f}")
    version = args.version or new_version("topics")
    out = VersionDir(args.out, version)
    meta = {"model_version": version, "feature_schema_hash": node_feature_schema_hash(), "input_name": INPUT_NAME}
    exported = export_regime_models(models, xt[:500], out.work, meta)
    write_profile(out.work, regime_profile(
        version=version, used=models.feature_names, x_full=xt, probs=probs,
        abstain_mask=judge_rules(xt, probs, rules)[0],
        source=f"test windows recorded on {args.from_topics} (after the time split), written at training time"))
    card = {
        "model": "regime", "version": version, "created": version[:15], "training_command": command,
        "training_seconds": round(time.perf_counter() - started, 1),
        "features": {"schema_hash": node_feature_schema_hash(), "schema_version": FEATURE_SCHEMA_VERSION,
                     "names": list(NODE_FEATURE_NAMES), "used": models.feature_names,
                     "definition": "featurelib/node/schema.py"},
        "outputs": dict(current.card["outputs"]),
        "onnx": {"input_name": INPUT_NAME, **exported},
        "training": {"algorithm": "xgboost", "trees": args.trees, "depth": args.depth, "seed": args.seed,
                     "from_topics": True, "retrained_from": served},
        "data": {"source": f"recorded {args.from_topics} windows + simulator ground truth {args.truth.name}",
                 "windows": len(stamps), "train_windows": int(train.sum()), "test_windows": int(test.sum()),
                 "split": {"kind": "time", "train_end_ms": boundary, "gap_s": args.gap_s,
                           "train_fraction": args.train_fraction},
                 "label": "majority ground-truth regime over the window's last pane; slowdown = its mean"},
        "metrics": {"later_windows": metrics},
        "abstention": abstention | {"low_confidence_note": f"floor copied from {served}, not recalibrated"},
        "intended_use": current.card.get("intended_use", ""),
        "limitations": [f"Candidate retrained from recorded topics: evaluated on {int(test.sum())} later windows of "
                        "the same recording only; the confidence floor is the served version's."],
    }
    path = out.publish(card, set_current=False)
    progress(f"wrote candidate {path} (CURRENT still {served}; promote: borgctl model promote regime {version})")
    return {"model": "regime", "version": version, "path": str(path), "served": served,
            "test_windows": int(test.sum()), "accuracy_candidate": metrics["candidate"]["accuracy"],
            "accuracy_current": metrics["current"]["accuracy"], "seconds": round(time.perf_counter() - started, 1)}


def train_regime_from_topics(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if args.quick:
        args.trees, args.depth = min(args.trees, 30), min(args.depth, 4)
    progress = Progress(enabled=not args.quiet)
    command = "borgctl train regime " + shlex.join(argv)
    try:
        result = run(args, progress, command)
    except (FromTopicsError, FileExistsError) as exc:
        print(f"train regime: {exc}", file=sys.stderr)
        record_run(args.out, {"model": "regime", "ok": False, "error": str(exc), "ts": time.time()})
        return 2
    except ParityError as exc:
        print(f"train regime: {exc}", file=sys.stderr)
        record_run(args.out, {"model": "regime", "ok": False, "error": str(exc), "ts": time.time()})
        return 1
    record_run(args.out, {**result, "ok": True, "ts": time.time()})
    return 0
