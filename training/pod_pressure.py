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

``borgctl train pod-pressure [--out models/pod_pressure] [--quick]`` trains the extended-events model the same
way, measures it on the held-out kinds, exports one ONNX regressor per resource (parity-checked) with the
training features' input ranges (outside them the stage answers ``unknown``), writes the model card and points
``CURRENT`` at it: what the ``pod-pressure`` stage serves (docs/decision_plane.md, "Interference moves").

Reported (JSON with ``--out``): per resource, the error on held-out kinds — mean absolute error of the pressure,
of the *excess* over the free 0.25 (what the interference model reads), and the log-ratio spread σ where the true
pressure exceeds 0.25 (comparable with the arena's ``--pod-pressure-noise``) — for both event sets.

The extended model is also asked whether averaging helps: 600 held-out-kind pods seen over ``AVERAGED_WINDOWS``
windows each (new co-runners and count noise per window), one window's estimate against the mean of all of them
(``heldout_averaged``), and whether the contention regime read off per-pod estimates generalises to unseen kinds
better than the node-level regime model (``regime_from_pods``: the held-out kinds on clusters seeded as ``borgctl
eval regime``'s seeds 7–9 — the same node SKUs, epochs drawn by the same rule — and the training kinds on a fresh
seed).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from contracts.models import REGIMES
from featurelib.pod import EXTENDED_EVENTS, EXTENDED_FEATURES, WINDOW_S, pod_feature_schema_hash, pod_features
from simulator.cluster import COL, EVENTS, SyntheticCluster, node_specs_for, workload_rates
from simulator.workloads import FREE_PRESSURE, KINDS, REGIME_THRESHOLD, RESOURCES, excess, regime_of
from training.corunner import card_kinds
from training.regime.selective import risk_coverage, selective_metrics

ROOT: Final = Path(__file__).resolve().parents[1]
KIND: Final = "pod-pressure"
RANGE_QUANTILES: Final = (0.001, 0.999)
RANGE_MARGIN: Final = 0.1
"""Input ranges: the training features' 0.1–99.9 % quantiles, widened by 10 % of their span on each side."""
COUNT_NOISE: Final = 0.05
REGIME_EVAL_SEEDS: Final = (7, 8, 9)
"""``borgctl eval regime``'s reported seeds: the per-pod regime is measured on clusters seeded the same way."""
AVERAGED_WINDOWS: Final = 8
"""Windows per pod for the averaging check (``python -m training.pod_pressure``)."""


def pod_counts(rates: np.ndarray, rng: np.random.Generator, window_s: float = WINDOW_S) -> dict[str, float]:
    """One pod's counts over a window from its counter rates (a ``workload_rates`` row), with count noise."""
    noisy = rates * window_s * rng.normal(1.0, COUNT_NOISE, size=rates.shape).clip(0.5, 1.5)
    return {name: float(noisy[COL[name]]) for name in EVENTS}


@dataclass
class Samples:
    x: np.ndarray
    y: np.ndarray
    kinds: list[str]


def _corunners(corunner_kinds: Sequence[str], rng: np.random.Generator) -> list[str]:
    """1–5 co-runners drawn from ``corunner_kinds``."""
    return [corunner_kinds[int(rng.integers(len(corunner_kinds)))] for _ in range(int(rng.integers(1, 6)))]


def _node_rates(spec: Any, kinds: Sequence[str], inten: np.ndarray, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """Each pod's counter rates on ``spec`` (co-runners' slowdown included) and its true pressure (kind × intensity)."""
    pressures = np.array([KINDS[k].pressure for k in kinds]) * inten[:, None]
    per, _, _, _ = workload_rates(spec, kinds, inten, pressures, rng)
    return per, pressures


def _first_pods_window(spec: Any, kinds: Sequence[str], inten: np.ndarray, rng: np.random.Generator,
                       extended: bool) -> tuple[np.ndarray, np.ndarray]:
    """The features of ``kinds[0]``'s pod over one window beside the others on ``spec``, and its true pressure."""
    per, pressures = _node_rates(spec, kinds, inten, rng)
    return pod_features(pod_counts(per[0], rng), WINDOW_S, extended), pressures[0]


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
        kinds = [pod_kinds[int(rng.integers(len(pod_kinds)))], *_corunners(corunner_kinds, rng)]
        inten = rng.uniform(0.5, 1.0, size=len(kinds))
        features, pressure = _first_pods_window(spec, kinds, inten, rng, extended)
        xs.append(features)
        ys.append(pressure)
        names.append(kinds[0])
    return Samples(np.asarray(xs), np.asarray(ys), names)


def repeated(pods: int, pod_kinds: Sequence[str], corunner_kinds: Sequence[str], windows: int,
             seed: int) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """``pods`` pods (kind, intensity and node fixed), each seen over ``windows`` windows with new co-runners and
    count noise in each: per pod its windows' features [windows, F], the pods' true pressures [pods, 4], kinds."""
    rng = np.random.default_rng(seed)
    specs = node_specs_for(seed)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    names: list[str] = []
    for _ in range(pods):
        kind = pod_kinds[int(rng.integers(len(pod_kinds)))]
        intensity = float(rng.uniform(0.5, 1.0))
        spec = specs[int(rng.integers(len(specs)))]
        rows = []
        for _ in range(windows):
            kinds = [kind, *_corunners(corunner_kinds, rng)]
            inten = np.concatenate([[intensity], rng.uniform(0.5, 1.0, size=len(kinds) - 1)])
            rows.append(_first_pods_window(spec, kinds, inten, rng, True)[0])
        xs.append(np.asarray(rows))
        ys.append(np.asarray(KINDS[kind].pressure) * intensity)
        names.append(kind)
    return xs, np.asarray(ys), names


def averaging_errors(model: PodPressureModel, pods: list[np.ndarray], true: np.ndarray,
                     kinds: Sequence[str]) -> dict[str, Any]:
    """Does averaging a pod's estimates over its windows help? Errors of one window's estimate, of the mean over
    all its windows, and the log-ratio σ of that mean once each kind's mean bias is removed (the kind's bias is
    what no averaging over one pod's windows can remove)."""
    single = np.asarray([model.predict(rows[:1])[0] for rows in pods])
    mean = np.asarray([model.predict(rows).mean(axis=0) for rows in pods])
    return {"one_window": errors(single, true), "mean_of_windows": errors(mean, true),
            "mean_of_windows_within_kind_sigma": within_kind_sigma(mean, true, kinds)}


def within_kind_sigma(pred: np.ndarray, true: np.ndarray, kinds: Sequence[str]) -> dict[str, float]:
    """Per resource: the log-ratio σ (truth > FREE_PRESSURE) once each kind's mean log-ratio is subtracted."""
    out: dict[str, float] = {}
    names = np.asarray(kinds)
    for r, name in enumerate(RESOURCES):
        hot = true[:, r] > FREE_PRESSURE
        ratio = np.log(np.maximum(pred[hot, r], 1e-3) / true[hot, r])
        k = names[hot]
        resid = ratio - np.array([ratio[k == kind].mean() for kind in k]) if ratio.size else ratio
        out[name] = float(np.sqrt((resid ** 2).mean())) if resid.size else 0.0
    return out


def regime_from_pods(model: PodPressureModel, kinds: Sequence[str], seed: int, epochs: int = 3_000,
                     nodes: int = 32) -> dict[str, Any]:
    """The contention regime read off per-pod estimates instead of the node's counters (issue 20's question: would
    per-pod counters let the regime generalise to unseen kinds?). Nodes run what the regime evaluation's cluster
    runs (:meth:`SyntheticCluster.draw_epoch` on ``kinds``: a regime target, its aggressors, gentle co-runners);
    one 10 s window of every pod's own counts, each pod's pressure estimated, and the regime is ``regime_of`` on
    the estimates (the label's own rule, applied to what the counters say). Confidence = how far the closest
    resource's worst estimate is from ``REGIME_THRESHOLD`` (|log ratio|); metrics as ``borgctl eval regime``."""
    sim = SyntheticCluster(nodes=nodes, seed=seed, workloads=list(kinds))
    rng = np.random.default_rng(seed + 1)
    truth: list[int] = []
    pred: list[int] = []
    margin: list[float] = []
    for e in range(epochs):
        spec = sim.specs[e % nodes]
        names, inten = sim.draw_epoch()
        per, pressures = _node_rates(spec, names, inten, rng)
        x = np.asarray([pod_features(pod_counts(row, rng), WINDOW_S, model.extended) for row in per])
        estimates = model.predict(x)
        truth.append(REGIMES.index(regime_of(pressures)))
        pred.append(REGIMES.index(regime_of(estimates)))
        worst = np.maximum(estimates.max(axis=0), 1e-3)
        margin.append(float(np.abs(np.log(worst / REGIME_THRESHOLD)).min()))
    t, pr, conf = np.asarray(truth), np.asarray(pred), np.asarray(margin)
    out = selective_metrics(t, pr, np.ones(len(t), dtype=bool), REGIMES)
    curve = risk_coverage(t == pr, conf, np.zeros(len(t), dtype=bool), points=20)
    out["selective_accuracy_at"] = {f"{c:.2f}": a for c, a in
                                    zip(curve["coverage"], curve["selective_accuracy"], strict=True)}
    return out


class PodPressureModel:
    """One regressor per resource; ``predict`` returns pressures clipped to [0, 1]."""

    def __init__(self, extended: bool = True, seed: int = 0) -> None:
        self.extended = extended
        self.seed = seed
        self._boosters: list[Any] = []

    @property
    def boosters(self) -> list[Any]:
        return self._boosters

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
        if extended:
            pods, truth, kinds = repeated(600, held, train_kinds + held, AVERAGED_WINDOWS, args.seed + 3)
            averaged = averaging_errors(model, pods, truth, kinds)
            report[key]["heldout_averaged"] = {"windows": AVERAGED_WINDOWS, **averaged}
            print(f"# held-out kinds, one window vs the mean of {AVERAGED_WINDOWS} (new co-runners each): "
                  "log-ratio sigma; sigma left without each kind's bias", file=sys.stderr)
            for r in RESOURCES:
                one, avg = averaged["one_window"][r], averaged["mean_of_windows"][r]
                print(f"averaged {r:8s} {one['log_ratio_sigma']:.3f} -> {avg['log_ratio_sigma']:.3f}; "
                      f"within kind {averaged['mean_of_windows_within_kind_sigma'][r]:.3f}")
            regimes = {"train_kinds": regime_from_pods(model, train_kinds, args.seed + 11)}
            for eval_seed in REGIME_EVAL_SEEDS:
                regimes[f"heldout_seed{eval_seed}"] = regime_from_pods(model, held, eval_seed)
            report[key]["regime_from_pods"] = regimes
            print("# regime = regime_of(per-pod estimates), one window: accuracy; selective accuracy at coverage 0.60",
                  file=sys.stderr)
            for case, m in regimes.items():
                print(f"regime   {case:18s} {m['accuracy']:.3f}; {m['selective_accuracy_at']['0.60']:.3f}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def input_ranges(x: np.ndarray) -> list[list[float]]:
    """Per feature [low, high] the model answers inside (``RANGE_QUANTILES`` widened by ``RANGE_MARGIN``)."""
    lo, hi = np.quantile(x, RANGE_QUANTILES, axis=0)
    span = np.maximum(hi - lo, 1e-9)
    return [[float(a), float(b)] for a, b in zip(lo - RANGE_MARGIN * span, hi + RANGE_MARGIN * span, strict=True)]


def export(model: PodPressureModel, x_check: np.ndarray, out_dir: Path, version: str) -> dict[str, dict[str, Any]]:
    """One parity-checked ONNX file per resource (``<resource>.onnx``: float32[N, features] → [N, 1])."""
    from training.export_onnx import PARITY_TOLERANCE, ParityError, session, to_onnx

    files: dict[str, dict[str, Any]] = {}
    x32 = np.ascontiguousarray(x_check, dtype=np.float32)
    for r, name in enumerate(RESOURCES):
        booster = model.boosters[r].get_booster()
        proto = to_onnx(booster, x32.shape[1], {"model": KIND, "version": version, "resource": name})
        data = proto.SerializeToString()
        sess = session(data)
        got = np.asarray(sess.run(None, {sess.get_inputs()[0].name: x32})[0], dtype=np.float64).reshape(-1)
        expected = np.asarray(booster.inplace_predict(x32), dtype=np.float64).reshape(-1)
        diff = float(np.max(np.abs(got - expected))) if len(x32) else 0.0
        if not diff <= PARITY_TOLERANCE:
            raise ParityError(f"ONNX parity check failed for {name}.onnx: max |onnx - xgboost| = {diff:.3g}")
        (out_dir / f"{name}.onnx").write_bytes(data)
        files[f"{name}.onnx"] = {"resource": name, "parity_max_abs_diff": diff}
    return files


def train_and_save(args: argparse.Namespace, progress: Any, *, command: str) -> Path:
    """``borgctl train pod-pressure``: train (extended events), measure on held-out kinds, export, card."""
    from training.model_card import set_current, sha256_file, write_json

    train_kinds, held = card_kinds(args.regime_model, "train_kinds"), card_kinds(args.regime_model, "heldout_kinds")
    pods = 4_000 if args.quick else args.pods
    version = args.version or time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-s{args.seed}"
    out_dir: Path = args.out / version
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists: choose another --version")
    progress(f"training on {pods:,} simulated pods of {len(train_kinds)} training kinds")
    train_set = sample(pods, train_kinds, train_kinds, args.seed, True)
    model = PodPressureModel(True, args.seed).fit(train_set)
    progress("measuring on the held-out kinds (never trained on)")
    test = sample(max(1_000, pods // 4), held, train_kinds + held, args.seed + 1, True)
    same = sample(max(1_000, pods // 4), train_kinds, train_kinds + held, args.seed + 2, True)
    out_dir.mkdir(parents=True)
    try:
        files = export(model, test.x[:2_000], out_dir, version)
    except Exception:
        shutil.rmtree(out_dir, ignore_errors=True)  # no half-written version beside the good ones
        raise
    card: dict[str, Any] = {
        "model": KIND, "kind": KIND, "version": version, "command": command,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "features": {"schema_hash": pod_feature_schema_hash(True), "names": list(EXTENDED_FEATURES),
                     "events": list(EXTENDED_EVENTS), "window_s": WINDOW_S,
                     "input_ranges": input_ranges(train_set.x)},
        "outputs": {"resources": list(RESOURCES), "scale": "pressure 0..1 (simulator.workloads' interference model)"},
        "data": {"source": "simulated per-cgroup counters (simulator.cluster.workload_rates), no trace data",
                 "train_kinds": train_kinds, "heldout_kinds": held, "pods": pods, "seed": args.seed,
                 "window_s": WINDOW_S, "count_noise": COUNT_NOISE},
        "evaluation": {"heldout_kinds": errors(model.predict(test.x), test.y),
                       "train_kinds_new_samples": errors(model.predict(same.x), same.y)},
        "serving": {"files": files},
        "sha256": {name: sha256_file(out_dir / name) for name in files},
    }
    write_json(out_dir / "model_card.json", card)
    for r in RESOURCES:
        h = card["evaluation"]["heldout_kinds"][r]
        progress(f"{r:8s} held-out kinds: MAE {h['mae']:.3f}, log-ratio sigma {h['log_ratio_sigma']:.3f} "
                 f"(bias {h['log_ratio_bias']:+.3f})")
    if not args.no_set_current:
        set_current(args.out, version)
    return out_dir


def train_pod_pressure(argv: Sequence[str]) -> int:
    from training import cli_args

    def parse(items: list[str]) -> argparse.Namespace:
        p = cli_args.Parser(prog="borgctl train pod-pressure", description="per-pod pressure from cgroup counters "
                            "(simulated; measured on held-out workload kinds) → ONNX + model card")
        cli_args.add_model_root(p, "pod_pressure")
        cli_args.add_version(p)
        cli_args.add_no_set_current(p)
        cli_args.add_seed(p, 0)
        cli_args.add_quick(p, help="4,000 training pods instead of --pods (~5 s)")
        cli_args.add_quiet(p)
        p.add_argument("--pods", type=int, default=20_000, help="training pods (default 20,000)")
        p.add_argument("--regime-model", type=Path, default=ROOT / "models" / "regime",
                       help="regime model root whose card names the training and held-out kinds")
        args = p.parse_args(items)
        if args.pods < 100:
            raise cli_args.UsageError(f"--pods must be at least 100, got {args.pods}")
        return args

    return cli_args.run_trainer("borgctl train pod-pressure", argv, parse, train_and_save)


if __name__ == "__main__":
    sys.exit(main())
