"""Regime from per-pod counters read against the pod's own job: does it reach unseen kinds? Measured, nothing shipped.

``python -m training.regime.job_relative --out FILE [--cluster] [--jobs-per-kind 3] [--history 6]
[--windows 1,6] [--variants …] [--holdout-seed N] [--quick]``

The node model fails on unseen kinds because a new kind's *normal* profile looks like contention the training
kinds produced (training/README.md). Per-pod counters alone do not fix that (``training.pod_pressure``'s
``regime_from_pods``). What a pod's counters can say without knowing its kind is how far it is from **its own
job's undisturbed pods**: the pods of a job (a Deployment's replicas) run the same code, so their IPC, cache-miss
ratio, misses per kilo-instruction and branch-miss ratio are the same when nobody disturbs them — the reference
Google's CPI² (Zhang et al., EuroSys 2013) compares a task's CPI with. A co-runner's pressure moves them in ways
set by the victim's class, not its kind (``simulator.cluster.workload_rates``: IPC ÷ slowdown, miss ratio up with
the worst LLC pressure, branch misses up with core and frontend pressure).

Variants (the classifier's input per node):

* ``victims``: per pod, log(value / its job's reference) for the four ratios (the reference = the 0.9 quantile of
  IPC, the 0.1 quantile of the others, over the job's pods in the last ``--history`` snapshots, answered once
  ``MIN_REFERENCE_PODS`` distinct pods were seen), aggregated per node: largest and summed rise, and the
  cache-miss ratio, cache references per kilo-instruction and IPC of the pods that rose most (how sensitive the
  victim is). A node with one pod has no victim;
* ``victims_stalls``: the same plus the frontend- and backend-stall fractions (where the PMU counts them per
  cgroup; the node agent's default per-cgroup events do not include them). Every pod's stalls are read, also on
  the simulated SKUs whose node counters lack them, and no pod counter is multiplexed: the figures assume a fleet
  that counts them everywhere;
* ``victims_activity``: ``victims`` plus each pod's busy cores against its job's median and the profile of the
  busiest-for-its-job pod. In this simulator a replica's pressure grows with its intensity and so does its CPU,
  but the evaluation cluster draws a kind's aggressors and its gentle co-runners from two separate intensity
  bands (``SyntheticCluster._draw``), so a job's median splits them by construction: an upper bound, not what a
  real fleet would give;
* ``profile`` (the control): the pods' absolute features, largest and smallest over the node's pods — what the
  node model sees, per pod;
* ``victims_node`` / ``victims_node_lag`` (``--cluster`` only): ``victims`` plus the node's own feature row (what
  the node model reads), and for ``_lag`` both again for the node's previous window — the recipe the shipped
  pod-relative model serves (``featurelib.pod_regime``, ``borgctl train regime-pods``).

Two ways to make the data. Default, fleet snapshots: every node draws an epoch as ``borgctl eval regime``'s
cluster does (:meth:`SyntheticCluster.draw_epoch`; the counter rates drawn once per epoch, as the cluster draws
them), each pod's features averaged over ``--windows`` 10 s windows of that epoch, which differ by count noise
only. ``--cluster``: ``borgctl eval regime``'s own clusters, tick by tick (:class:`PodCluster`: the node side bit
for bit, the pods' counts beside it), its panes and labels (the pane's majority regime), a pod's features averaged
over its own last ``--windows`` windows (a pod lives one epoch, 30–120 s), the reference over the last
``--history`` × 10 s. A pod's job is its kind and one of ``--jobs-per-kind`` jobs drawn when it starts.

Classifier: XGBoost, 300 × 4, η 0.05, trained on the regime model's **training kinds** (64 nodes, seed 101,
twice the evaluation's length) and scored on its **held-out kinds** seeded 7 / 8 / 9 (32 nodes: ``eval regime``'s
clusters) and on the training kinds on a fresh seed: accuracy, ``sel_at_060`` (accuracy of the 60 % most confident
windows; issue 20's target is 0.90 there), per-regime recall, accuracy by pods on the node. ``--holdout-seed``
holds out other kinds (one per class) instead of the card's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from contracts.models import REGIMES
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import as_model_input
from featurelib.node.windows import DictStore, NodeWindows
from featurelib.pod import EXTENDED_FEATURES, WINDOW_S, pod_features
from simulator.cluster import EVENTS, SyntheticCluster, node_rates, workload_rates
from simulator.workloads import KINDS, holdout_split, regime_of
from training.cli_args import comma_ints
from training.corunner import card_kinds
from training.pod_pressure import pod_counts
from training.regime.fleet_screen import accuracy_and_selective

STALL_FEATURES: Final = ("frontend_stall", "backend_stall")
"""Stalled cycles (frontend, backend) per cycle: generic events many Intel parts lack (``simulator.cluster``'s
``OPTIONAL_GROUPS``), so they are read only by the ``victims_stalls`` variant."""
FEATURE_INDEX: Final = {name: i for i, name in enumerate((*EXTENDED_FEATURES, *STALL_FEATURES))}
VICTIM_RATIOS: Final = (("ipc", 0.9, -1.0), ("miss_ratio", 0.1, 1.0), ("miss_pki", 0.1, 1.0),
                        ("branch_miss_ratio", 0.1, 1.0))
"""(feature, reference quantile over the job's pods, sign): the deviation log(value / reference) × sign rises
when the pod is disturbed (IPC falls, the others rise)."""
STALL_RATIOS: Final = (("frontend_stall", 0.1, 1.0), ("backend_stall", 0.1, 1.0))
ACTIVITY: Final = ("busy_cores", 0.5, 1.0)
RATIOS: Final = (*VICTIM_RATIOS, *STALL_RATIOS, ACTIVITY)
"""Every deviation computed, in this column order (``JobReference.deviations``)."""
PROFILE: Final = ("ipc", "miss_ratio", "miss_pki", "branch_miss_ratio", "ref_pki", "branch_pki")
MIN_REFERENCE_PODS: Final = 3
VARIANTS: Final = ("victims", "victims_stalls", "victims_activity", "profile", "victims_node", "victims_node_lag")
NODE_VARIANTS: Final = ("victims_node", "victims_node_lag")
"""``--cluster`` only: ``victims`` plus the node's own features (and, ``_lag``, both again for the node's previous
window) — the recipe ``featurelib.pod_regime`` serves (``borgctl train regime-pods``)."""
EVAL_SEEDS: Final = (7, 8, 9)
TRAIN_SEED: Final = 101
SAME_KINDS_SEED: Final = 202
COVERAGE: Final = 0.60
SNAPSHOTS: Final = 40
TICKS_PER_SNAPSHOT: Final = 10
"""``--cluster``: the cluster ticks every second and a window is 10 s, so a snapshot's worth is 10 ticks."""
CLUSTER_SECONDS: Final = 1500
"""``--cluster``: ``borgctl eval regime``'s cluster length (32 nodes × 1,500 s = 4,800 windows)."""
Job = tuple[str, int]
Reporter = Callable[[str], None]


@dataclass(frozen=True)
class NodeWindow:
    """One node in one fleet snapshot: its true regime, its pods' features (rows), each pod's job and identity."""

    regime: int
    pods: np.ndarray
    jobs: tuple[Job, ...]
    ids: tuple[Hashable, ...]
    """A pod seen in several windows (``--cluster``) keeps its id: the reference counts distinct pods."""
    node: str = ""
    node_x: np.ndarray | None = None
    """``--cluster``: the node's own feature row (``featurelib.node``), for the ``victims_node*`` variants."""


class JobReference:
    """Each job's undisturbed value of each ratio, from its pods in the last ``history`` snapshots (pure).

    Answered once ``min_pods`` *distinct* pods of the job were seen: a job's lone replica is never judged against its
    own earlier windows (which would only say it is as disturbed as it was)."""

    def __init__(self, history: int, ratios: Sequence[tuple[str, float, float]], min_pods: int = MIN_REFERENCE_PODS
                 ) -> None:
        if history < 1 or min_pods < 1:
            raise ValueError("history and min_pods must be >= 1")
        self.ratios = tuple(ratios)
        self.min_pods = min_pods
        self._snapshots: deque[list[tuple[Job, Hashable, np.ndarray]]] = deque(maxlen=history)
        self._reference: dict[Job, np.ndarray] = {}

    def add(self, snapshot: Iterable[NodeWindow]) -> None:
        """Add one snapshot's pods and recompute every job's reference."""
        self._snapshots.append([(job, pod, row) for w in snapshot
                                for job, pod, row in zip(w.jobs, w.ids, w.pods, strict=True)])
        pool: dict[Job, list[np.ndarray]] = {}
        seen: dict[Job, set[Hashable]] = {}
        for snap in self._snapshots:
            for job, pod, row in snap:
                pool.setdefault(job, []).append(row)
                seen.setdefault(job, set()).add(pod)
        self._reference = {}
        for job, rows in pool.items():
            if len(seen[job]) >= self.min_pods:
                a = np.asarray(rows)
                self._reference[job] = np.array([np.quantile(a[:, FEATURE_INDEX[n]], q) for n, q, _ in self.ratios])

    def deviations(self, w: NodeWindow) -> np.ndarray:
        """Per pod (rows) and ratio: sign × log(value / its job's reference); NaN without a reference or a value."""
        out = np.full((len(w.jobs), len(self.ratios)), np.nan)
        for k, job in enumerate(w.jobs):
            ref = self._reference.get(job)
            if ref is None:
                continue
            for r, (name, _, sign) in enumerate(self.ratios):
                value = w.pods[k, FEATURE_INDEX[name]]
                if value > 0 and ref[r] > 0:
                    out[k, r] = sign * np.log(value / ref[r])
        return out


def _column_max(a: np.ndarray) -> np.ndarray:
    finite = np.isfinite(a)
    return np.where(finite.any(axis=0), np.max(np.where(finite, a, -np.inf), axis=0), np.nan)


def _most(a: np.ndarray, column: int) -> int:
    """Row with the largest finite value of ``column`` (0 when there is none)."""
    values = a[:, column]
    return int(np.nanargmax(values)) if np.isfinite(values).any() else 0


def node_vector(w: NodeWindow, deviations: np.ndarray, variant: str) -> np.ndarray:
    """The classifier's input for one node (``variant`` in ``VARIANTS``; module docstring)."""
    if variant == "profile":
        own = w.pods[:, :len(EXTENDED_FEATURES)]
        return np.concatenate([[len(w.jobs)], own.max(axis=0), own.min(axis=0)])
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    read = len(VICTIM_RATIOS) + (len(STALL_RATIOS) if variant == "victims_stalls" else 0)
    victims = deviations[:, :read]
    rises = np.nansum(np.clip(victims, 0.0, None), axis=0)
    most_miss, most_branch = _most(victims, 1), _most(victims, 3)
    sensitivity = [w.pods[most_miss, FEATURE_INDEX["miss_ratio"]], w.pods[most_miss, FEATURE_INDEX["ref_pki"]],
                   w.pods[most_branch, FEATURE_INDEX["ipc"]]]
    parts = [[len(w.jobs), float(np.isfinite(victims[:, 0]).sum())], _column_max(victims), rises, sensitivity]
    if variant == "victims_activity":
        busiest = _most(deviations, len(RATIOS) - 1)
        parts += [_column_max(deviations[:, -1:]), [w.pods[busiest, FEATURE_INDEX[n]] for n in PROFILE]]
    return np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])


def pod_row(counts: dict[str, float]) -> np.ndarray:
    """A pod's features (``featurelib.pod``, extended events) and its stalled-cycle fractions."""
    cycles = counts["cycles"]
    stalls = [counts[f"stalled-cycles-{side}"] / cycles if cycles > 0 else 0.0 for side in ("frontend", "backend")]
    return np.concatenate([pod_features(counts, WINDOW_S, True), stalls])


def fleet(kinds: Sequence[str], seed: int, snapshots: int, nodes: int, jobs_per_kind: int, windows: int
          ) -> list[list[NodeWindow]]:
    """``snapshots`` fleet snapshots of ``nodes`` nodes running ``kinds`` (module docstring)."""
    sim = SyntheticCluster(nodes=nodes, seed=seed, workloads=list(kinds))
    rng = np.random.default_rng(seed + 1)
    out: list[list[NodeWindow]] = []
    for _ in range(snapshots):
        snap: list[NodeWindow] = []
        for i in range(nodes):
            names, inten = sim.draw_epoch()
            pressures = np.array([KINDS[k].pressure for k in names]) * inten[:, None]
            # one draw of the epoch's rates, as the cluster does (its CPU use and IPC draw hold for the epoch);
            # each window adds only count noise
            per, _, _, _ = workload_rates(sim.specs[i], names, inten, pressures, rng)
            rows = [[pod_row(pod_counts(r, rng)) for r in per] for _ in range(windows)]
            jobs = tuple((n, int(rng.integers(jobs_per_kind))) for n in names)
            ids = tuple((len(out), i, k) for k in range(len(names)))  # every snapshot draws new pods
            snap.append(NodeWindow(REGIMES.index(regime_of(pressures)), np.mean(rows, axis=0), jobs, ids))
        out.append(snap)
    return out


class PodCluster(SyntheticCluster):
    """``SyntheticCluster`` that also yields each pod's counts per tick, with its job (``tick_pods``).

    The node side is untouched (same draws, same counters, bit for bit): the pods' rates are the very rows the
    node's counters are summed from (``workload_rates``), scaled by the node's load of the tick, with their own
    per-tick noise from a separate generator. A pod is (node, epoch serial, position); its job is its kind and one
    of ``jobs_per_kind`` drawn when its epoch starts.
    """

    def __init__(self, *, jobs_per_kind: int, pod_noise: float | None = None, **kw: Any) -> None:
        """``pod_noise``: log-normal sigma of each pod count per tick (None: the cluster's ``noise``, 0.02 by
        default; the node's counters keep ``noise`` either way)."""
        if pod_noise is not None and pod_noise < 0:
            raise ValueError(f"pod_noise must be >= 0, got {pod_noise}")
        self.jobs_per_kind = jobs_per_kind
        self.pod_noise = pod_noise
        self._pod_rng = np.random.default_rng(int(kw.get("seed", 0)) + 7919)
        self._stash: np.ndarray | None = None
        self.pod_rates: dict[int, np.ndarray] = {}
        self.pod_ids: dict[int, tuple[tuple[int, int, int], ...]] = {}
        self.pod_jobs: dict[int, tuple[Job, ...]] = {}
        self._serial = 0
        super().__init__(**kw)

    def _epoch_rates(self, spec: Any, kinds: list[str], inten: np.ndarray, pressures: np.ndarray
                     ) -> tuple[np.ndarray, float, float, float]:
        per, util, mem, freq = workload_rates(spec, kinds, inten, pressures, self._rng)
        self._stash = per
        return node_rates(spec, per), util, mem, freq

    def _new_epoch(self, i: int) -> None:
        super()._new_epoch(i)
        epoch = self._epochs[i]
        assert epoch is not None
        assert self._stash is not None
        self._serial += 1
        self.pod_rates[i] = self._stash
        self.pod_ids[i] = tuple((i, self._serial, k) for k in range(len(epoch.kinds)))
        self.pod_jobs[i] = tuple((name, int(self._pod_rng.integers(self.jobs_per_kind))) for name in epoch.kinds)

    def tick_pods(self, node: int) -> np.ndarray:
        """This tick's counts of the node's pods (rows; call after ``tick``)."""
        rates = self.pod_rates[node]
        dt = self.interval_ms / 1000.0
        sigma = self.noise if self.pod_noise is None else self.pod_noise
        noise = np.exp(sigma * self._pod_rng.standard_normal(rates.shape))
        out: np.ndarray = rates * self._load[node] * dt * noise
        return out


def cluster_windows(kinds: Sequence[str], seed: int, nodes: int, ticks: int, jobs_per_kind: int, windows: int
                    ) -> list[list[NodeWindow]]:
    """The windows ``borgctl eval regime`` judges (same cluster, same panes, label = the pane's majority regime),
    each with its pods' features: a pod's counts summed over the pane's ticks it ran in, scaled to the window, and
    averaged with its own last ``windows`` - 1 windows (a pod lives one epoch, 30–120 s). One list per tick: the
    windows that closed in it (panes are phased per node)."""
    sim = PodCluster(nodes=nodes, seed=seed, workloads=list(kinds), jobs_per_kind=jobs_per_kind)
    machine = NodeWindows(DictStore())
    regimes: dict[tuple[str, int], list[int]] = defaultdict(list)
    sums: dict[tuple[str, int], dict[tuple[int, int, int], tuple[np.ndarray, int, Job]]] = defaultdict(dict)
    recent: dict[tuple[int, int, int], deque[np.ndarray]] = {}
    out: list[list[NodeWindow]] = []
    for batch in sim.run(ticks):
        closed: list[NodeWindow] = []
        for i, state in enumerate(batch.nodestate_dicts()):
            sample = sample_from_dict(state)
            key = (sample.node, machine.pane_of(sample.node, sample.ts_ms))
            regimes[key].append(int(batch.regime[i]))
            pane = sums[key]
            for pod, job, counts in zip(sim.pod_ids[i], sim.pod_jobs[i], sim.tick_pods(i), strict=True):
                total, n, _ = pane.get(pod, (np.zeros(len(EVENTS)), 0, job))
                pane[pod] = (total + counts, n + 1, job)
            for window in machine.observe(sample).windows:
                done = (window.node, window.pane)
                label = Counter(regimes.pop(done)).most_common(1)[0][0]
                pods = sums.pop(done)
                newest = max(pod[:2] for pod in pods)  # a pane can straddle two epochs: judge the newer one
                last = [pod for pod in pods if pod[:2] == newest]
                rows, jobs = [], []
                for pod in last:
                    total, n, job = pods[pod]
                    scaled = total * (WINDOW_S / (n * sim.interval_ms / 1000.0))
                    history = recent.setdefault(pod, deque(maxlen=windows))
                    history.append(pod_row({name: float(v) for name, v in zip(EVENTS, scaled, strict=True)}))
                    rows.append(np.mean(history, axis=0))
                    jobs.append(job)
                closed.append(NodeWindow(label, np.asarray(rows), tuple(jobs), tuple(last), window.node,
                                         as_model_input(window.values, window.valid)))
        live = {pod for ids in sim.pod_ids.values() for pod in ids}
        for gone in [pod for pod in recent if pod not in live]:
            del recent[gone]
        out.append(closed)
    return out


def vectors(data: Sequence[Sequence[NodeWindow]], variant: str, history: int) -> tuple[np.ndarray, np.ndarray]:
    """Every node window's input and true regime, the job references built snapshot by snapshot (a snapshot's
    reference includes its own pods and the ``history`` - 1 before it, never a later one)."""
    reference = JobReference(history, RATIOS)
    x: list[np.ndarray] = []
    y: list[int] = []
    previous: dict[str, np.ndarray] = {}
    for snap in data:
        reference.add(snap)
        for w in snap:
            if variant in NODE_VARIANTS:
                if w.node_x is None:
                    raise ValueError(f"variant {variant} reads the node's own features: run it with --cluster")
                row = np.concatenate([node_vector(w, reference.deviations(w), "victims"), w.node_x])
                if variant == "victims_node_lag":
                    lag = previous.get(w.node, np.full(len(row), np.nan))
                    previous[w.node] = row
                    row = np.concatenate([row, lag])
                x.append(row)
            else:
                x.append(node_vector(w, reference.deviations(w), variant))
            y.append(w.regime)
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)


def fit(x: np.ndarray, y: np.ndarray, seed: int = 0) -> Any:
    import xgboost as xgb

    model = xgb.XGBClassifier(n_estimators=300, max_depth=4, learning_rate=0.05, subsample=0.9, random_state=seed,
                              n_jobs=2, objective="multi:softprob", num_class=len(REGIMES))
    model.fit(x, y)
    return model


def scores(proba: np.ndarray, y: np.ndarray, pods: np.ndarray) -> dict[str, Any]:
    """Accuracy, selective accuracy at ``COVERAGE``, recall per regime, accuracy by pods on the node."""
    correct = proba.argmax(axis=1) == y
    accuracy, selective = accuracy_and_selective(proba, y, COVERAGE)
    return {"windows": len(y), "accuracy": accuracy, "sel_at_060": selective,
            "recall": {REGIMES[i]: float(correct[y == i].mean()) for i in range(len(REGIMES)) if (y == i).any()},
            "accuracy_by_pods": {str(int(k)): float(correct[pods == k].mean()) for k in np.unique(pods)}}


def run(args: argparse.Namespace, say: Reporter) -> dict[str, Any]:
    if args.holdout_seed is None:
        train_kinds, held = card_kinds(args.model, "train_kinds"), card_kinds(args.model, "heldout_kinds")
    else:
        split = holdout_split(seed=args.holdout_seed)
        train_kinds, held = list(split[0]), list(split[1])
    default = CLUSTER_SECONDS // TICKS_PER_SNAPSHOT if args.cluster else SNAPSHOTS
    snapshots = 6 if args.quick else (args.snapshots or default)
    history = args.history * (TICKS_PER_SNAPSHOT if args.cluster else 1)  # cluster: one reference step per tick
    report: dict[str, Any] = {"train_kinds": train_kinds, "heldout_kinds": held, "snapshots": snapshots,
                              "mode": "cluster" if args.cluster else "snapshots",
                              "jobs_per_kind": args.jobs_per_kind, "history": args.history, "settings": {}}
    for windows in args.windows:
        started = time.perf_counter()
        def sim(kinds: Sequence[str], seed: int, count: int, nodes: int, windows: int = windows
                ) -> list[list[NodeWindow]]:
            if args.cluster:  # ``count`` snapshots = ``count`` × 10 s of the cluster
                return cluster_windows(kinds, seed, nodes, count * TICKS_PER_SNAPSHOT, args.jobs_per_kind, windows)
            return fleet(kinds, seed, count, nodes, args.jobs_per_kind, windows)
        train_fleet = sim(train_kinds, TRAIN_SEED, 2 * snapshots, 8 if args.quick else 64)
        tests = {f"heldout_seed{s}": sim(held, s, snapshots, 8 if args.quick else 32) for s in EVAL_SEEDS}
        tests["train_kinds"] = sim(train_kinds, SAME_KINDS_SEED, snapshots, 8 if args.quick else 32)
        say(f"windows {windows}: fleets simulated ({time.perf_counter() - started:.0f} s)")
        rows: dict[str, Any] = {}
        for variant in args.variants:
            x, y = vectors(train_fleet, variant, history)
            model = fit(x, y)
            row: dict[str, Any] = {}
            for case, data in tests.items():
                xt, yt = vectors(data, variant, history)
                row[case] = scores(model.predict_proba(xt), yt, xt[:, 0])
            held_rows = [row[f"heldout_seed{s}"] for s in EVAL_SEEDS]
            row["heldout_mean"] = {"accuracy": float(np.mean([r["accuracy"] for r in held_rows])),
                                   "sel_at_060": float(np.mean([r["sel_at_060"] for r in held_rows]))}
            rows[variant] = row
            say(f"windows {windows} {variant:>16}: held-out kinds accuracy / sel@0.60 "
                + "  ".join(f"{r['accuracy']:.3f}/{r['sel_at_060']:.3f}" for r in held_rows)
                + f"; training kinds {row['train_kinds']['accuracy']:.3f}/{row['train_kinds']['sel_at_060']:.3f}")
        report["settings"][f"windows_{windows}"] = rows
    return report


def _positive_ints(text: str) -> list[int]:
    return comma_ints(text, minimum=1)


def _variants(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in values if v not in VARIANTS]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {unknown or text!r}; choose from {', '.join(VARIANTS)}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.regime.job_relative", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="JSON report")
    p.add_argument("--model", type=Path, default=Path(__file__).resolve().parents[2] / "models" / "regime",
                   help="regime model root whose card names the training and held-out kinds")
    p.add_argument("--holdout-seed", type=int, default=None,
                   help="hold out other kinds (simulator.workloads.holdout_split with this seed; one per class) "
                        "instead of the regime model card's")
    p.add_argument("--snapshots", type=int, default=None,
                   help=f"fleet snapshots per evaluation cluster (default {SNAPSHOTS}; training: 2x); with "
                        f"--cluster, 10 s each (default there {CLUSTER_SECONDS} s, as borgctl eval regime)")
    p.add_argument("--cluster", action="store_true",
                   help="judge borgctl eval regime's own windows (its clusters run tick by tick, panes and labels "
                        "as it makes them) instead of independent fleet snapshots")
    p.add_argument("--jobs-per-kind", type=int, default=3, help="jobs each kind's pods are split into")
    p.add_argument("--history", type=int, default=6, help="snapshots a job's reference is drawn from")
    p.add_argument("--windows", type=_positive_ints, default=[1, 6],
                   help="10 s windows averaged per pod (comma-separated)")
    p.add_argument("--variants", type=_variants, default=None,
                   help=f"comma-separated: {', '.join(VARIANTS)} (default: all; without --cluster all but "
                        f"{', '.join(NODE_VARIANTS)})")
    p.add_argument("--quick", action="store_true", help="tiny fleets (a smoke run, figures meaningless)")
    args = p.parse_args(argv)
    if args.variants is None:
        args.variants = [v for v in VARIANTS if args.cluster or v not in NODE_VARIANTS]
    if not args.cluster and set(args.variants) & set(NODE_VARIANTS):
        p.error(f"--variants {', '.join(NODE_VARIANTS)} read the node's own features: add --cluster")
    for name in ("snapshots", "jobs_per_kind", "history"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    report = run(args, lambda msg: print(f"job-relative: {msg}", file=sys.stderr, flush=True))
    report["command"] = "python -m training.regime.job_relative " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    for setting, rows in report["settings"].items():
        for variant, row in rows.items():
            mean = row["heldout_mean"]
            print(f"{setting} {variant:>16}: held-out kinds accuracy {mean['accuracy']:.3f}, "
                  f"selective accuracy at 0.60 {mean['sel_at_060']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
