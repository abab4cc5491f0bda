"""Train and ship the pod-relative regime model: a node's regime from its pods read against their own jobs.

``borgctl train regime-pods [--out models/regime_pods] [--kinds-from models/regime] [--holdout-seed N] [--quick]
[--no-current]``
(or ``python -m training.regime.pod_model``)

The input rows are ``featurelib.pod_regime``'s (the code ``borgctl eval regime --basis pods`` and a serving stage
run): each pod's ratios against its job's undisturbed pods, the node's own features, and both for the node's
previous window. The data: :class:`PodCluster` (``borgctl eval regime``'s simulated cluster, node side bit for bit,
with each pod's counts written into the NodeState's per-cgroup counters as a node agent with a cgroup root
publishes them, and each pod's job — its kind and one of ``JOBS_PER_KIND`` jobs — as a pod's controller would
name it). Trained on the node regime model's **training kinds** only (its card's ``data.train_kinds``), so its
held-out kinds stay unseen and ``borgctl eval regime --basis pods`` judges it on them.

Abstention (card ``abstention``, applied by ``services.regime.pod_model.PodRegimeModel.judge``):

* ``counters_missing``: no pod of the node was read (no per-cgroup counters — a node without a hardware PMU has
  none —, or every pod lacked an event or did no work). The node's own counters are not required: a SKU without
  LLC events still has its pods' generic cache events, and the classifier takes the missing node features as
  missing;
* ``low_confidence``: the top probability is below the floor, calibrated on **kinds the model did not train on,
  drawn from the training kinds** — the evaluation's held-out kinds are never touched: in each of
  ``CALIBRATION_SPLIT_SEEDS`` folds one training kind per class is set aside, a classifier is fitted on the rest
  and scores a cluster of the set-aside kinds; the shipped floor is the lowest that gives ``SELECTIVE_TARGET``
  selective accuracy on the folds' unseen-kind windows pooled (one fold alone is noisy: measured 2026-11-29, the
  three folds' own floors were 0.63, 0.56 and 0.94).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnxmltools
from onnxmltools.convert.common.data_types import FloatTensorType

from contracts.models import REGIMES
from featurelib.node.schema import node_feature_schema_hash
from featurelib.pod import EXTENDED_EVENTS
from featurelib.pod_regime import COLUMNS, N_COLUMNS, PodRegimeWindows, pod_regime_schema_hash
from simulator.cluster import EVENTS
from simulator.workloads import KINDS, holdout_split
from training.regime.artifacts import INPUT_NAME, VersionDir, max_abs_diff, new_version, save_onnx, session
from training.regime.job_relative import PodCluster, fit
from training.regime.model import TARGET_OPSET
from training.regime.selective import confidence_floor

JOBS_PER_KIND: Final = 3
TRAIN_SEED: Final = 101
VALIDATION_SEED: Final = 303
TRAIN_NODES: Final = 64
TRAIN_TICKS: Final = 3000
SELECTIVE_TARGET: Final = 0.90
CALIBRATION_SPLIT_SEEDS: Final = (11, 12, 13)
MODEL_KIND: Final = "regime_pods"
CLASSIFIER_FILE: Final = "regime_pods_classifier.onnx"
Reporter = Callable[[str], None]
_EVENT_COLUMNS: Final = tuple(i for i, name in enumerate(EVENTS) if name in EXTENDED_EVENTS)


def pod_uid(pod: tuple[int, int, int]) -> str:
    """A Kubernetes-shaped UID for a simulated pod (node, epoch serial, position)."""
    node, serial, position = pod
    return f"{node:08x}-0000-4000-8000-{serial:06x}{position:06x}"


@dataclass(frozen=True)
class PodRegimeData:
    x: np.ndarray
    """(windows, N_COLUMNS) float32."""
    regime: np.ndarray
    """(windows,) index into REGIMES: the pane's majority regime (as ``borgctl eval regime`` labels)."""
    params: dict[str, Any]

    def __len__(self) -> int:
        return len(self.regime)


def simulate(kinds: Sequence[str], *, seed: int, nodes: int, ticks: int, jobs_per_kind: int = JOBS_PER_KIND,
             progress: Reporter | None = None, label: str = "simulation") -> PodRegimeData:
    """The cluster ``borgctl eval regime`` simulates for ``kinds``/``seed``, its NodeStates carrying each pod's
    counts per cgroup, through :class:`PodRegimeWindows`; labelled by the pane's majority regime."""
    sim = PodCluster(nodes=nodes, seed=seed, workloads=list(kinds), jobs_per_kind=jobs_per_kind)
    jobs: dict[str, str] = {}  # every pod ever started (a few thousand): a pane closes after its pods left
    frames = PodRegimeWindows(jobs.get)
    regimes: dict[tuple[str, int], list[int]] = defaultdict(list)
    xs: list[np.ndarray] = []
    labels: list[int] = []
    interval_ns = sim.interval_ms * 1_000_000
    step = max(1, ticks // 5)
    for batch in sim.run(ticks):
        for i, state in enumerate(batch.nodestate_dicts()):
            cgroups: dict[str, dict[str, dict[str, Any]]] = {}
            for pod, (kind, job), counts in zip(sim.pod_ids[i], sim.pod_jobs[i], sim.tick_pods(i), strict=True):
                uid = pod_uid(pod)
                jobs[uid] = f"sim/{kind}-{job}"
                cgroups[f"/kubepods/burstable/pod{uid}"] = {
                    EVENTS[c]: {"value": float(counts[c]), "raw": float(counts[c]), "enabled_ns": interval_ns,
                                "running_ns": interval_ns, "status": "counted"} for c in _EVENT_COLUMNS}
            state["cgroups"] = cgroups
            node = str(state["node"])
            regimes[(node, frames.machine.pane_of(node, int(state["ts_ms"])))].append(int(batch.regime[i]))
            for window in frames.observe(state):
                xs.append(window.x)
                labels.append(Counter(regimes.pop((window.node, window.pane))).most_common(1)[0][0])
        if progress is not None and (batch.tick + 1) % step == 0:
            progress(f"{label}: tick {batch.tick + 1}/{ticks}, {len(labels):,} windows")
    params = {"kinds": list(kinds), "seed": seed, "nodes": nodes, "ticks": ticks, "jobs_per_kind": jobs_per_kind}
    return PodRegimeData(np.asarray(xs, dtype=np.float32).reshape(-1, N_COLUMNS),
                         np.asarray(labels, dtype=np.int64), params)


def calibration_kinds(train_kinds: Sequence[str], seed: int) -> tuple[list[str], list[str]]:
    """(fit, novel): one kind per class of ``train_kinds`` set aside (never the evaluation's held-out kinds)."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[str]] = defaultdict(list)
    for kind in train_kinds:
        by_class[KINDS[kind].workload_class].append(kind)
    novel = sorted(str(rng.choice(sorted(kinds))) for kinds in by_class.values() if len(kinds) > 1)
    return [k for k in train_kinds if k not in novel], novel


def calibration_fold(train_kinds: Sequence[str], split_seed: int, k: int, nodes: int, ticks: int,
                     progress: Reporter) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """One fold: fit on all but one kind per class, score the set-aside kinds: (summary with the fold's own floor,
    top probability and correctness of every window with a pod read)."""
    fit_kinds, novel = calibration_kinds(train_kinds, split_seed)
    seen = simulate(fit_kinds, seed=TRAIN_SEED + 1 + k, nodes=nodes, ticks=ticks, progress=progress,
                    label=f"fold {k + 1}: fit kinds")
    unseen = simulate(novel, seed=VALIDATION_SEED + k, nodes=max(4, nodes // 2), ticks=ticks // 2,
                      progress=progress, label=f"fold {k + 1}: unseen kinds {', '.join(novel)}")
    probs = fit(seen.x, seen.regime).predict_proba(unseen.x)
    answered = unseen.x[:, 0] >= 1  # pods read: the counters rule
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == unseen.regime
    floor, met = confidence_floor(confidence[answered], correct[answered], target=SELECTIVE_TARGET)
    kept = answered & (confidence >= floor)
    progress(f"fold {k + 1}: floor {floor:.3f} ({'meets' if met else 'misses'} {SELECTIVE_TARGET}), "
             f"accuracy {correct[answered].mean():.3f}, coverage {kept.mean():.3f}")
    summary = {"fit_kinds": fit_kinds, "unseen_kinds": novel, "fit": seen.params, "unseen": unseen.params,
               "floor": floor, "target_met": met, "accuracy": float(correct[answered].mean()),
               "coverage": float(kept.mean()),
               "selective_accuracy": float(correct[kept].mean()) if kept.any() else None}
    return summary, confidence[answered], correct[answered]


def train(out_root: Path, train_kinds: Sequence[str], heldout_kinds: Sequence[str], *, quick: bool,
          progress: Reporter, command: str, set_current: bool = True) -> Path:
    nodes, ticks = (8, 400) if quick else (TRAIN_NODES, TRAIN_TICKS)
    started = time.perf_counter()
    runs = [calibration_fold(train_kinds, seed, k, nodes, ticks, progress)
            for k, seed in enumerate(CALIBRATION_SPLIT_SEEDS[:1] if quick else CALIBRATION_SPLIT_SEEDS)]
    folds = [summary for summary, _, _ in runs]
    confidence = np.concatenate([c for _, c, _ in runs])
    correct = np.concatenate([h for _, _, h in runs])
    floor, met = confidence_floor(confidence, correct, target=SELECTIVE_TARGET)
    kept = confidence >= floor
    pooled = {"windows": len(confidence), "accuracy": float(correct.mean()), "coverage": float(kept.mean()),
              "selective_accuracy": float(correct[kept].mean()) if kept.any() else None}
    progress(f"confidence floor {floor:.3f} ({'meets' if met else 'misses'} {SELECTIVE_TARGET} on {len(folds)} "
             f"folds of unseen kinds pooled: coverage {pooled['coverage']:.3f})")
    data = simulate(train_kinds, seed=TRAIN_SEED, nodes=nodes, ticks=ticks, progress=progress, label="training")
    classifier = fit(data.x, data.regime)
    progress(f"fitted on {len(data):,} windows ({time.perf_counter() - started:.0f} s so far)")
    version = new_version("pods")
    work = VersionDir(out_root, version)
    types = [(INPUT_NAME, FloatTensorType([None, N_COLUMNS]))]
    onnx_model = onnxmltools.convert_xgboost(classifier, initial_types=types, target_opset=TARGET_OPSET)
    check = data.x[:2000]
    parity = max_abs_diff(np.asarray(session(onnx_model).run(None, {INPUT_NAME: check})[1]),
                          classifier.predict_proba(check))
    if not parity <= 1e-4:
        raise RuntimeError(f"ONNX differs from XGBoost by {parity:.3g}")
    digest = save_onnx(onnx_model, work.work / CLASSIFIER_FILE, {"model": MODEL_KIND, "version": version})
    card = {
        "model": MODEL_KIND, "version": version, "command": command,
        "features": {"schema_hash": pod_regime_schema_hash(), "columns": list(COLUMNS),
                     "node_schema_hash": node_feature_schema_hash()},
        "outputs": {"regimes": list(REGIMES)},
        "data": {"train_kinds": list(train_kinds), "heldout_kinds": list(heldout_kinds), "training": data.params,
                 "windows": len(data), "regime_counts": np.bincount(data.regime, minlength=len(REGIMES)).tolist()},
        "classifier": {"kind": "XGBClassifier", "n_estimators": 300, "max_depth": 4, "learning_rate": 0.05},
        "abstention": {
            "required_features": [], "min_pods_read": 1,
            "low_confidence": {"floor": floor, "target": SELECTIVE_TARGET, "target_met": met,
                               "rule": "lowest floor reaching the target on the folds' unseen-kind windows pooled",
                               "pooled": pooled, "folds": folds},
        },
        "onnx": {"files": {"classifier": CLASSIFIER_FILE}, "sha256": {CLASSIFIER_FILE: digest},
                 "input_name": INPUT_NAME, "parity_max_abs_diff": parity},
    }
    final = work.publish(card, set_current=set_current)
    progress(f"wrote {final}")
    return final


def main(argv: Sequence[str] | None = None) -> int:
    from services.runtime.model_watch import ModelRefusedError
    from training.corunner import card_kinds

    root = Path(__file__).resolve().parents[2] / "models"
    p = argparse.ArgumentParser(prog="borgctl train regime-pods", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=root / "regime_pods", help="model root (a new version + CURRENT)")
    p.add_argument("--kinds-from", type=Path, default=root / "regime",
                   help="node regime model whose card names the training and held-out kinds")
    p.add_argument("--holdout-seed", type=int, default=None,
                   help="hold out other kinds (simulator.workloads.holdout_split with this seed; one per class) "
                        "instead of the --kinds-from card's: a robustness check, not a model to ship")
    p.add_argument("--quick", action="store_true", help="tiny clusters (a smoke run; the model is not worth shipping)")
    p.add_argument("--no-current", action="store_true", help="do not point CURRENT at the new version")
    args = p.parse_args(argv)
    if args.holdout_seed is not None:
        split = holdout_split(seed=args.holdout_seed)
        train_kinds, heldout = list(split[0]), list(split[1])
    else:
        try:
            train_kinds = card_kinds(args.kinds_from, "train_kinds")
            heldout = card_kinds(args.kinds_from, "heldout_kinds")
        except (OSError, ValueError, ModelRefusedError) as exc:
            p.error(f"--kinds-from {args.kinds_from}: {exc}")
    command = "borgctl train regime-pods " + " ".join(sys.argv[1:] if argv is None else argv)
    train(args.out, train_kinds, heldout, quick=args.quick, command=command, set_current=not args.no_current,
          progress=lambda msg: print(f"pod regime: {msg}", file=sys.stderr, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
