"""``borgctl train anomaly``: isolation forest on simulated node windows, evaluated on injected anomalies.

Training cluster: a small anomaly rate (unsupervised: the forest never sees labels).
Evaluation cluster: another seed with more injected anomalies (cpu_hog, memory_leak,
counter_glitch, thrashing, hang); a window is anomalous when most of its ticks are.
Artifacts: ``<out>/<version>/isolation_forest.onnx`` + ``model_card.json``; ``<out>/CURRENT``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import sklearn

from featurelib.node.schema import FEATURE_SCHEMA_VERSION, NODE_FEATURE_NAMES, node_feature_schema_hash
from training import cli_args
from training.anomaly.model import AnomalyModel, evaluate, export_anomaly_model, fit_anomaly_model
from training.progress import Progress
from training.regime.artifacts import INPUT_NAME, VersionDir, new_version
from training.regime.simwindows import anomaly_distribution, simulate_windows

PROG = "borgctl train anomaly"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    cli_args.add_model_root(p, "anomaly")
    cli_args.add_version(p, None)
    p.add_argument("--nodes", type=int, default=48)
    p.add_argument("--ticks", type=int, default=1500)
    p.add_argument("--test-nodes", type=int, default=32)
    p.add_argument("--test-ticks", type=int, default=1500)
    p.add_argument("--train-anomaly-rate", type=float, default=0.0005)
    p.add_argument("--test-anomaly-rate", type=float, default=0.004)
    p.add_argument("--target-fpr", type=float, default=0.02, help="alert threshold = this quantile of training")
    p.add_argument("--trees", type=int, default=100)
    cli_args.add_seed(p, 11)
    cli_args.add_no_set_current(p, None)
    cli_args.add_quick(p)
    cli_args.add_quiet(p, short=True)
    return p


def _args(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.nodes, args.ticks, args.test_nodes, args.test_ticks, args.trees = 16, 700, 12, 700, 50
    if not 0.0 < args.target_fpr < 0.5:
        raise cli_args.UsageError("--target-fpr must be in (0, 0.5)")
    return args


def train_anomaly(argv: Sequence[str]) -> int:
    """Entry point wired into ``borgctl train anomaly``; returns an exit code."""
    return cli_args.run_trainer(PROG, argv, _args, run)


def run(args: argparse.Namespace, progress: Progress, *, command: str) -> Path:
    started = time.perf_counter()
    train = simulate_windows(kinds=None, nodes=args.nodes, ticks=args.ticks, seed=args.seed,
                             anomaly_rate=args.train_anomaly_rate, progress=progress, label="train")
    test = simulate_windows(kinds=None, nodes=args.test_nodes, ticks=args.test_ticks, seed=args.seed + 1000,
                            anomaly_rate=args.test_anomaly_rate, progress=progress, label="test")
    progress(f"windows: train {len(train):,} {anomaly_distribution(train.anomaly)}; "
             f"test {len(test):,} {anomaly_distribution(test.anomaly)}")
    model = fit_anomaly_model(train.x, trees=args.trees, seed=args.seed, target_fpr=args.target_fpr)
    metrics = {"injected_anomalies": evaluate(model, test.x, test.anomaly),
               "training_cluster": evaluate(model, train.x, train.anomaly)}
    m = metrics["injected_anomalies"]
    progress(f"test: ROC AUC {m['roc_auc']:.3f}, precision {m['precision'] or 0:.3f}, recall {m['recall'] or 0:.3f}, "
             f"FPR {m['false_positive_rate']:.4f}; recall by kind "
             + ", ".join(f"{k} {v['recall'] if v['recall'] is not None else 'n/a'}"
                         for k, v in m["recall_by_kind"].items()))
    version = args.version or new_version("sim")
    out = VersionDir(args.out, version)
    meta = {"model_version": version, "feature_schema_hash": node_feature_schema_hash(), "input_name": INPUT_NAME}
    exported = export_anomaly_model(model, np.concatenate([test.x[:1000], train.x[:200]]), out.work, meta)
    progress(f"exported ONNX (parity max |diff| {exported['parity_max_abs_diff']:.2e})")
    card = _card(args, version, command, model, exported, metrics, train.params, time.perf_counter() - started)
    return out.publish(card, set_current=not args.no_set_current)


def _card(args: argparse.Namespace, version: str, command: str, model: AnomalyModel, exported: dict[str, Any],
          metrics: dict[str, Any], params: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {
        "model": "anomaly",
        "version": version,
        "created": version[:15],
        "training_command": command,
        "training_seconds": round(seconds, 1),
        "features": {"schema_hash": node_feature_schema_hash(), "schema_version": FEATURE_SCHEMA_VERSION,
                     "names": list(NODE_FEATURE_NAMES), "used": model.feature_names,
                     "definition": "featurelib/node/"},
        "outputs": {"score": "s = -(scores + offset), the isolation-forest anomaly score in (0, 1]",
                    "offset": model.offset, "threshold": model.threshold, "target_fpr": args.target_fpr},
        "onnx": {"input_name": INPUT_NAME,
                 "input": f"{INPUT_NAME}: float32[N, {len(model.feature_names)}] (features.used order), NaN = "
                          "invalid (imputed with training medians inside the graph)",
                 **exported, "onnxruntime_version": onnxruntime.__version__},
        "training": {"algorithm": "sklearn IsolationForest + median imputer", "sklearn_version": sklearn.__version__,
                     "trees": args.trees, "max_samples": int(model.pipeline[-1].max_samples_), "seed": args.seed},
        "data": {"source": "simulator with injected anomalies (labels used for evaluation only)",
                 "train": params, "test_anomaly_rate": args.test_anomaly_rate},
        "metrics": metrics,
        "intended_use": "Flag node windows whose counters are unlike the fleet's usual behaviour.",
        "limitations": ["Unsupervised and trained on a simulator; the threshold fixes the false-positive rate "
                        "on simulated data only.", "Short anomalies (< one 10 s pane) are diluted."],
    }


def main() -> int:
    return train_anomaly(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
