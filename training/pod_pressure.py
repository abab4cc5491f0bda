"""Per-pod pressure from per-cgroup counters: how well can it be estimated? (issue 21)

``python -m training.pod_pressure [--out FILE]``. The orchestrator's corrective moves and the extender's load
term need each running pod's pressure on llc / membw / core / frontend (docs/arena.md, "Moves in the
orchestrator"); their gain depends on how close the estimate is. This trains a regressor from per-pod
features (:mod:`featurelib.pod`) to that pressure on the regime model's **training kinds** and measures it on
the **held-out kinds** (never fitted on):

* samples: a node (one of the simulator's SKUs, :class:`simulator.cluster.SyntheticCluster`) runs 2–6 pods of
  random kinds at intensities U(0.5, 1) (the arena's); each pod's counts over a 10 s window come from the
  simulator's per-workload counter model (:func:`simulator.cluster.workload_rates`: co-runners' slowdown
  included) with ±5 % Poisson-like count noise; the target is the pod's true pressure (kind × intensity);
* training set: every pod and co-runner of a training kind; evaluation: the pod of a held-out kind, its
  co-runners of any kind (as in the arena);
* one XGBoost regressor per resource (squared error, clipped to [0, 1]).

Reported (JSON with ``--out``): per resource, the error on held-out kinds — mean absolute error of the pressure,
of the *excess* over the free 0.25 (what the interference model reads), and the log-ratio spread σ where the true
pressure exceeds 0.25 (comparable with the arena's ``--pod-pressure-noise``) — for both event sets.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from featurelib.pod import pod_features
from simulator.cluster import COL, EVENTS, node_specs_for, workload_rates
from simulator.workloads import FREE_PRESSURE, KINDS, RESOURCES, excess
from training.corunner import card_kinds

ROOT: Final = Path(__file__).resolve().parents[1]
WINDOW_S: Final = 10.0
COUNT_NOISE: Final = 0.05


def pod_counts(rates: np.ndarray, rng: np.random.Generator, window_s: float = WINDOW_S) -> dict[str, float]:
    """One pod's counts over a window from its counter rates (a ``workload_rates`` row), with count noise."""
    noisy = rates * window_s * rng.normal(1.0, COUNT_NOISE, size=rates.shape).clip(0.5, 1.5)
    return {name: float(noisy[COL[name]]) for name in EVENTS}


@dataclass
class Samples:
    x: np.ndarray
    y: np.ndarray
    kinds: list[str]


def sample(pods: int, pod_kinds: Sequence[str], corunner_kinds: Sequence[str], seed: int,
           extended: bool = True) -> Samples:
    """``pods`` pods of ``pod_kinds`` beside 1–5 co-runners of ``corunner_kinds`` (module docstring)."""
    rng = np.random.default_rng(seed)
    specs = node_specs_for(seed)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    names: list[str] = []
    while len(xs) < pods:
        spec = specs[int(rng.integers(len(specs)))]
        kinds = [pod_kinds[int(rng.integers(len(pod_kinds)))]]
        kinds += [corunner_kinds[int(rng.integers(len(corunner_kinds)))] for _ in range(int(rng.integers(1, 6)))]
        inten = rng.uniform(0.5, 1.0, size=len(kinds))
        pressures = np.array([KINDS[k].pressure for k in kinds]) * inten[:, None]
        per, _, _, _ = workload_rates(spec, kinds, inten, pressures, rng)
        xs.append(pod_features(pod_counts(per[0], rng), WINDOW_S, extended))
        ys.append(pressures[0])
        names.append(kinds[0])
    return Samples(np.asarray(xs), np.asarray(ys), names)


class PodPressureModel:
    """One regressor per resource; ``predict`` returns pressures clipped to [0, 1]."""

    def __init__(self, extended: bool = True, seed: int = 0) -> None:
        self.extended = extended
        self.seed = seed
        self._boosters: list[Any] = []

    def fit(self, s: Samples) -> PodPressureModel:
        import xgboost as xgb

        self._boosters = []
        for r in range(len(RESOURCES)):
            m = xgb.XGBRegressor(n_estimators=300, max_depth=5, learning_rate=0.08, subsample=0.9,
                                 colsample_bytree=1.0, random_state=self.seed, n_jobs=1)
            m.fit(s.x, s.y[:, r])
            self._boosters.append(m)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(-1, len(self._boosters[0].feature_importances_))
        out: np.ndarray = np.clip(np.column_stack([b.predict(x) for b in self._boosters]), 0.0, 1.0)
        return out


def train(train_kinds: Sequence[str], extended: bool = True, pods: int = 20_000, seed: int = 0) -> PodPressureModel:
    return PodPressureModel(extended, seed).fit(sample(pods, train_kinds, train_kinds, seed, extended))


def errors(pred: np.ndarray, true: np.ndarray) -> dict[str, dict[str, float]]:
    """Per resource: MAE of pressure and of excess, and the log-ratio σ where the true pressure > FREE_PRESSURE."""
    out: dict[str, dict[str, float]] = {}
    for r, name in enumerate(RESOURCES):
        t, p = true[:, r], pred[:, r]
        hot = t > FREE_PRESSURE
        ratio = np.log(np.maximum(p[hot], 1e-3) / t[hot]) if hot.any() else np.zeros(0)
        out[name] = {"mae": float(np.abs(p - t).mean()), "excess_mae": float(np.abs(excess(p) - excess(t)).mean()),
                     "log_ratio_sigma": float(np.sqrt((ratio ** 2).mean())) if ratio.size else 0.0,
                     "log_ratio_bias": float(ratio.mean()) if ratio.size else 0.0, "hot_share": float(hot.mean())}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.pod_pressure", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "regime", help="regime model root (its kinds)")
    p.add_argument("--pods", type=int, default=20_000, help="training samples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    train_kinds, held = card_kinds(args.model, "train_kinds"), card_kinds(args.model, "heldout_kinds")
    report: dict[str, Any] = {"train_kinds": train_kinds, "heldout_kinds": held, "pods": args.pods, "seed": args.seed}
    for extended in (False, True):
        started = time.perf_counter()
        model = train(train_kinds, extended, args.pods, args.seed)
        test = sample(5_000, held, train_kinds + held, args.seed + 1, extended)
        same = sample(5_000, train_kinds, train_kinds + held, args.seed + 2, extended)
        key = "extended" if extended else "basic"
        report[key] = {"heldout": errors(model.predict(test.x), test.y),
                       "train_kinds_new_samples": errors(model.predict(same.x), same.y)}
        print(f"# {key} events ({time.perf_counter() - started:.0f} s): resource, held-out kinds MAE / excess MAE / "
              f"log-ratio sigma (bias) where pressure > {FREE_PRESSURE}; training kinds' sigma", file=sys.stderr)
        for r in RESOURCES:
            h, t = report[key]["heldout"][r], report[key]["train_kinds_new_samples"][r]
            print(f"{key:8s} {r:8s} {h['mae']:.3f} / {h['excess_mae']:.3f} / {h['log_ratio_sigma']:.3f} "
                  f"({h['log_ratio_bias']:+.3f}, {h['hot_share']:.0%} hot); train kinds {t['log_ratio_sigma']:.3f}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
