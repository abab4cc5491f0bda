"""``borgctl eval regime``: the SHIPPED regime model, with its abstention rules, on data it never saw.

Trains nothing. Loads the model through ``services.regime.model.load_regime_model`` (the loader the
regime stage uses) and judges every window with ``RegimeModel.judge`` (the stage's abstention code),
so the coverage measured here is the coverage served. Two sources:

* default: a freshly simulated cluster running only the model card's held-out workload kinds
  (``--seed`` changes the cluster); writes accuracy, coverage, selective accuracy and per-class
  recall in the bench result format (``loadtests/bench_format.py``: ``machine`` + ``results`` rows,
  plus ``details``) and the risk–coverage curve as ``<out stem>.png`` beside ``--out``;
* ``--alibaba PATH``: the Alibaba 2018 machine_usage series (no labels): the distribution of labels
  and abstention reasons.

``--basis pods`` judges the shipped pod-relative model instead (``models/regime_pods``,
``services.regime.pod_model``): the same cluster, its NodeStates carrying each pod's per-cgroup counts and each
pod's job, read through ``featurelib.pod_regime`` (``training.regime.pod_model.simulate``).

``--record`` also stores the summary in the model card (``evaluation`` section) with the command.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np
import orjson

from contracts.models import REGIMES
from loadtests.bench_format import machine
from services.regime import abstention
from services.regime.model import RegimeModel, load_regime_model
from services.runtime.model_watch import ModelRefusedError, resolve
from training.cli_args import Parser, UsageError, add_quick, add_quiet, add_seed, command_line, run_cli
from training.errors import UserFacingError
from training.progress import Progress
from training.regime.artifacts import CARD_FILE, write_json
from training.regime.selective import risk_coverage, selective_metrics
from training.regime.simwindows import Reporter, simulate_windows

ROOT = Path(__file__).resolve().parents[2]
BENCH: Final = "eval_regime"
BATCH: Final = 4096
HARD = abstention.COUNTERS_MISSING | abstention.OUT_OF_DISTRIBUTION


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="borgctl eval regime", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="result JSON (bench format); the PNG goes beside it")
    p.add_argument("--basis", choices=("node", "pods"), default="node",
                   help="node: the node regime model on the node's counters; pods: the pod-relative model on each "
                        "pod's counters against its own job's pods")
    p.add_argument("--model", type=Path, default=None,
                   help="model root (its CURRENT) or a version directory (default models/regime, or "
                        "models/regime_pods with --basis pods)")
    p.add_argument("--pod-noise", type=float, default=None, metavar="S",
                   help="--basis pods: relative spread of each pod count per 10 s window (default 0.05: "
                        "training.regime.pod_model.POD_NOISE; 0.006 is what the first three recipes were measured at)")
    add_seed(p, 7, help="simulator seed of the evaluation cluster")
    p.add_argument("--nodes", type=int, default=32)
    p.add_argument("--ticks", type=int, default=1500, help="intervals of 1 s (10 s windows)")
    add_quick(p, help="small cluster (seconds): 12 nodes x 600 ticks")
    p.add_argument("--alibaba", type=Path, default=None,
                   help="judge the Alibaba 2018 machine_usage.csv instead of a simulated cluster (no labels)")
    p.add_argument("--record", action="store_true", help="store the summary in the model card (evaluation)")
    add_quiet(p, short=True)
    return p


class JudgedModel(Protocol):
    """What this evaluation needs of a model: the node model (``RegimeModel``) and the pod-relative one."""

    @property
    def regimes(self) -> tuple[str, ...]: ...

    def __call__(self, x: np.ndarray, /) -> tuple[np.ndarray, Any]: ...

    def judge(self, x: np.ndarray, probs: np.ndarray, /) -> tuple[np.ndarray, np.ndarray]: ...


def judge_all(model: JudgedModel, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(probabilities, abstention mask, OOD score, judge seconds) in batches of ``BATCH`` rows."""
    probs, masks, oods = [], [], []
    judge_s = 0.0
    for i in range(0, len(x), BATCH):
        chunk = x[i:i + BATCH]
        p, _ = model(chunk)
        t0 = time.perf_counter()
        m, o = model.judge(chunk, p)
        judge_s += time.perf_counter() - t0
        probs.append(p)
        masks.append(m)
        oods.append(o)
    k = len(model.regimes)
    if not probs:
        return np.zeros((0, k)), np.zeros(0, dtype=np.uint8), np.zeros(0), 0.0
    return np.concatenate(probs), np.concatenate(masks), np.concatenate(oods), judge_s


def reason_counts(mask: np.ndarray) -> dict[str, float]:
    """Fraction of windows carrying each abstention reason (a window may carry several)."""
    n = max(len(mask), 1)
    return {name: float(((mask & bit) != 0).sum() / n) for bit, name in abstention.REASON_BITS}


def label_distribution(pred: np.ndarray, mask: np.ndarray, regimes: Sequence[str]) -> dict[str, float]:
    n = max(len(pred), 1)
    out = {r: float(((pred == i) & (mask == 0)).sum() / n) for i, r in enumerate(regimes)}
    out["unknown"] = float((mask != 0).sum() / n)
    return out


def evaluate_windows(model: JudgedModel, x: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
    """Metrics of the shipped model + rules on labelled windows (truth: index into the model's regimes)."""
    probs, mask, ood, judge_s = judge_all(model, x)
    pred = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=np.int64)
    answered = mask == 0
    out = selective_metrics(truth, pred, answered, model.regimes)
    out["abstention_reasons"] = reason_counts(mask)
    out["label_distribution"] = label_distribution(pred, mask, model.regimes)
    out["judge_us_per_window"] = float(judge_s / max(len(x), 1) * 1e6)
    finite = ood[np.isfinite(ood)]
    out["ood_score_quantiles"] = ({q: float(np.quantile(finite, float(q))) for q in ("0.5", "0.9", "0.99")}
                                  if len(finite) else {})
    conf = probs.max(axis=1) if len(probs) else np.zeros(0)
    out["risk_coverage"] = risk_coverage(truth == pred, conf, (mask & HARD) != 0)
    k = len(model.regimes)
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (truth[answered], pred[answered]), 1)
    out["confusion_answered"] = {"rows_truth_cols_predicted": list(model.regimes), "matrix": cm.tolist()}
    return out


def plot_risk_coverage(path: Path, summary: dict[str, Any], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = summary["risk_coverage"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(curve["coverage"], curve["selective_accuracy"], label="ranked by confidence (hard abstentions last)")
    if summary["selective_accuracy"] is not None:
        ax.scatter([summary["coverage"]], [summary["selective_accuracy"]], color="red", zorder=3,
                   label="shipped abstention rules")
    ax.axhline(0.9, color="grey", linestyle=":", linewidth=1, label="target 0.90")
    ax.axvline(0.6, color="grey", linestyle="--", linewidth=1, label="coverage 0.60")
    ax.set_xlabel("coverage (fraction answered)")
    ax.set_ylabel("selective accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def result_rows(case: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(metric: str, value: float | None, unit: str) -> None:
        if value is not None:
            rows.append({"bench": BENCH, "case": case, "metric": metric, "value": float(value), "unit": unit})

    add("windows", summary["windows"], "windows")
    for key in ("accuracy", "coverage", "selective_accuracy"):
        add(key, summary.get(key), "fraction")
    for key in ("recall", "selective_recall"):
        for cls, v in summary.get(key, {}).items():
            add(f"{key}_{cls}", v, "fraction")
    for reason, v in summary["abstention_reasons"].items():
        add(f"abstain_{reason}", v, "fraction")
    add("judge_us_per_window", summary["judge_us_per_window"], "us")
    return rows


def write_doc(path: Path, rows: list[dict[str, Any]], details: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine(), "results": rows, "details": details}
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def record_in_card(version_dir: Path, key: str, entry: dict[str, Any]) -> None:
    """Add ``entry`` under ``evaluation[key]`` of the card (the card is not covered by its own sha256)."""
    path = version_dir / CARD_FILE
    card = orjson.loads(path.read_bytes())
    card.setdefault("evaluation", {})[key] = entry
    write_json(path, card)


def _card_entry(summary: dict[str, Any], command: str) -> dict[str, Any]:
    keep = ("windows", "accuracy", "coverage", "selective_accuracy", "recall", "selective_recall",
            "abstention_reasons", "label_distribution", "judge_us_per_window")
    return {"command": command, **{k: summary[k] for k in keep if k in summary}}


def run(args: argparse.Namespace, progress: Reporter, command: str) -> int:
    model: JudgedModel
    if args.pod_noise is not None and (args.basis != "pods" or args.pod_noise < 0):
        raise UsageError("--pod-noise needs --basis pods and a value >= 0")
    if args.basis == "pods":
        from services.regime.pod_model import load_pod_regime_model

        if args.alibaba is not None:
            raise UsageError("--alibaba judges the node model: the Alibaba 2018 trace has no per-pod counters")
        version_dir = resolve(args.model or ROOT / "models" / "regime_pods")
        model = pods = load_pod_regime_model(version_dir)
        version, card, what = pods.version, pods.card, "pod-relative regime"
    else:
        version_dir = resolve(args.model or ROOT / "models" / "regime")
        model = node = load_regime_model(version_dir)
        if args.alibaba is not None:
            return _run_alibaba(args, node, version_dir, progress, command)
        version, card, what = node.version, node.card, "regime"
    progress(f"{what} model {version} ({version_dir})")
    kinds = list(card.get("data", {}).get("heldout_kinds") or [])
    if not kinds:
        print(f"eval regime: {version_dir} names no held-out kinds (data.heldout_kinds)", file=sys.stderr)
        return 2
    if list(model.regimes) != list(REGIMES):
        print(f"eval regime: model regimes {model.regimes} differ from {REGIMES}", file=sys.stderr)
        return 2
    nodes, ticks = (12, 600) if args.quick else (args.nodes, args.ticks)
    progress(f"simulating {nodes} nodes x {ticks} s, held-out kinds only: {', '.join(kinds)} (seed {args.seed})")
    if args.basis == "pods":
        from training.regime.pod_model import POD_NOISE, simulate

        noise = POD_NOISE if args.pod_noise is None else args.pod_noise
        pod_data = simulate(kinds, seed=args.seed, nodes=nodes, ticks=ticks, pod_noise=noise,
                            span_windows=pods.span_windows, progress=progress, label="held-out kinds")
        x, truth, params = pod_data.x, pod_data.regime, pod_data.params
    else:
        data = simulate_windows(kinds=kinds, nodes=nodes, ticks=ticks, seed=args.seed, progress=progress,
                                label="held-out kinds")
        x, truth, params = data.x, data.regime, data.params
    progress(f"judging {len(truth):,} windows")
    summary = evaluate_windows(model, x, truth)
    case = f"{'pods_' if args.basis == 'pods' else ''}heldout_kinds_seed{args.seed}"
    details = {"command": command, "basis": args.basis, "model_version": version, "model_dir": str(version_dir),
               "heldout_kinds": kinds, "simulation": params, "abstention_rules": card.get("abstention"),
               case: summary}
    write_doc(args.out, result_rows(case, summary), details)
    png = args.out.with_suffix(".png")
    plot_risk_coverage(png, summary, f"{what} {version}, held-out kinds, seed {args.seed}")
    sel = summary["selective_accuracy"]
    progress(f"accuracy {summary['accuracy']:.3f}, coverage {summary['coverage']:.3f}, selective accuracy "
             + ("n/a" if sel is None else f"{sel:.3f}") + f"; reasons {summary['abstention_reasons']}")
    if args.record:
        record_in_card(version_dir, case, _card_entry(summary, command))
    progress(f"wrote {args.out} and {png}")
    return 0


def _run_alibaba(args: argparse.Namespace, model: RegimeModel, version_dir: Path, progress: Reporter,
                 command: str) -> int:
    from training.regime.alibaba import alibaba_windows, load_machine_usage

    if not args.alibaba.exists():
        print(f"eval regime: {args.alibaba} not found", file=sys.stderr)
        return 2
    frame = load_machine_usage(args.alibaba)
    progress(f"alibaba: {frame.height:,} rows; building windows through featurelib")
    x, _machines = alibaba_windows(frame)
    probs, mask, _, judge_s = judge_all(model, x)
    pred = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=np.int64)
    summary: dict[str, Any] = {"windows": len(x), "label_distribution": label_distribution(pred, mask, model.regimes),
               "abstention_reasons": reason_counts(mask),
               "answered_label_distribution_without_abstention": label_distribution(
                   pred, np.zeros_like(mask), model.regimes),
               "judge_us_per_window": float(judge_s / max(len(x), 1) * 1e6)}
    case = "alibaba2018"
    rows = [{"bench": BENCH, "case": case, "metric": f"label_{k}", "value": v, "unit": "fraction"}
            for k, v in summary["label_distribution"].items()]
    rows += [{"bench": BENCH, "case": case, "metric": f"abstain_{k}", "value": v, "unit": "fraction"}
             for k, v in summary["abstention_reasons"].items()]
    write_doc(args.out, rows, {"command": command, "model_version": model.version, "source": str(args.alibaba),
                               case: summary})
    progress(f"alibaba: {len(x):,} windows; labels {summary['label_distribution']}; "
             f"reasons {summary['abstention_reasons']}")
    if args.record:
        record_in_card(version_dir, case, {"command": command, **summary})
    progress(f"wrote {args.out}")
    return 0


def eval_regime(argv: Sequence[str]) -> int:
    """Entry point wired into ``borgctl eval regime``; returns an exit code (as every training CLI: ``run_cli``)."""
    args_list = list(argv)

    def body() -> int:
        args = build_parser().parse_args(args_list)
        if args.nodes <= 0 or args.ticks <= 0:
            raise UsageError("--nodes and --ticks must be positive")
        return run(args, Progress(enabled=not args.quiet), command_line("borgctl eval regime", args_list))

    return run_cli("eval regime", body, error_prefix="", user_errors=(UserFacingError, ModelRefusedError))


def main() -> int:
    return eval_regime(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
