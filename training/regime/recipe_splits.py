"""Which training recipe of the pod-relative model generalises better: each recipe trained on the kinds of a
held-out split and judged on clusters of that split's held-out kinds (the clusters ``borgctl eval regime --seed S``
simulates for them). A research tool for ``borgctl train regime-pods``'s choice of recipe; it trains nothing it
ships and fits no floor.

``python -m training.regime.recipe_splits [--splits 0,1,2,3,4] [--copies 0,4] [--draws 1] [--seeds 7,8] [--nodes 64
--ticks 3000] --out F.json`` (~1 min per split, recipe and draw at full size on 2 cores, plus the evaluation
clusters). A recipe is (copies, draws): ``draws`` classifiers averaged, as ``borgctl train regime-pods --draws``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from featurelib.pod_regime import SPAN_WINDOWS_MAX
from simulator.workloads import holdout_split
from training.regime.fleet_screen import accuracy_and_selective
from training.regime.pod_model import (
    JITTER_SEED,
    POD_NOISE_LEVELS,
    POD_SPAN_WINDOWS,
    TRAIN_NODES,
    TRAIN_SEED,
    TRAIN_TICKS,
    ClusterTooSmallError,
    fit_ensemble,
    median_noise,
    parse_noise_levels,
    simulate,
)

COVERAGE = 0.60


def judged(probs: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Accuracy and the selective accuracy of the ``COVERAGE`` most confident windows."""
    accuracy, selective = accuracy_and_selective(probs, truth, COVERAGE)
    return {"windows": len(truth), "accuracy": accuracy, "selective_accuracy_at_060": selective}


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.regime.recipe_splits", description=__doc__.split("\n")[0])
    p.add_argument("--splits", type=_ints, default=[0, 1, 2, 3, 4], help="holdout_split seeds")
    p.add_argument("--copies", type=_ints, default=[0, 4], help="jittered copies per kind (0 = named kinds only)")
    p.add_argument("--draws", type=_ints, default=[1], help="classifiers averaged per recipe (1 = one classifier)")
    p.add_argument("--seeds", type=_ints, default=[7, 8], help="evaluation cluster seeds")
    p.add_argument("--nodes", type=int, default=TRAIN_NODES)
    p.add_argument("--ticks", type=int, default=TRAIN_TICKS)
    p.add_argument("--pod-noise", type=parse_noise_levels, default=POD_NOISE_LEVELS, metavar="S[,S...]",
                   help="relative spread of each pod count per 10 s window: one level, or one per draw (cycling); "
                        "the evaluation clusters at the levels' median (default "
                        f"{','.join(map(str, POD_NOISE_LEVELS))})")
    p.add_argument("--span-windows", type=int, default=POD_SPAN_WINDOWS, metavar="N",
                   help=f"10 s windows each pod is read over, training and evaluation (default {POD_SPAN_WINDOWS}; "
                        "1 = the fourth recipe's single window)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.nodes < 4 or args.ticks < 100 or any(c < 0 for c in args.copies) or not args.splits or not args.seeds \
            or not args.draws or any(d < 1 for d in args.draws) \
            or not 1 <= args.span_windows <= SPAN_WINDOWS_MAX:
        p.error(f"need --nodes >= 4, --ticks >= 100, --copies >= 0, --draws >= 1, --span-windows "
                f"1..{SPAN_WINDOWS_MAX} and at least one split and seed")
    levels = args.pod_noise[0] if len(args.pod_noise) == 1 else args.pod_noise
    rows: list[dict[str, Any]] = []
    for split in args.splits:
        train_kinds, held = (list(k) for k in holdout_split(seed=split))
        clusters = [simulate(held, seed=s, nodes=max(4, args.nodes // 2), ticks=args.ticks // 2,
                             pod_noise=median_noise(levels), span_windows=args.span_windows)
                    for s in args.seeds]
        for copies, draws in itertools.product(args.copies, args.draws):
            started = time.perf_counter()
            try:
                model = fit_ensemble(train_kinds, seed=TRAIN_SEED, jitter_seed=JITTER_SEED - 1, copies=copies,
                                     draws=draws, nodes=args.nodes, ticks=args.ticks, progress=lambda _: None,
                                     label=f"split {split}, copies {copies}", pod_noise=levels,
                                     span_windows=args.span_windows)
            except ClusterTooSmallError as exc:
                p.error(str(exc))
            for seed, cluster in zip(args.seeds, clusters, strict=True):
                read = cluster.x[:, 0] >= 1
                got = judged(model.predict_proba(cluster.x[read]), cluster.regime[read])
                rows.append({"split": split, "heldout_kinds": held, "copies": copies, "draws": draws, "seed": seed,
                             **got})
                print(f"split {split} ({', '.join(held)}), copies {copies}, draws {draws}, seed {seed}: accuracy "
                      f"{got['accuracy']:.3f}, at coverage {COVERAGE} {got['selective_accuracy_at_060']:.3f}",
                      file=sys.stderr, flush=True)
            print(f"split {split}, copies {copies}, draws {draws}: {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps({"rows": rows, "nodes": args.nodes, "ticks": args.ticks,
                                       "pod_noise": list(args.pod_noise), "span_windows": args.span_windows},
                                      option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
