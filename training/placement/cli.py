"""``borgctl train placement``: tabular Q-learning of placement in the offline arena (docs/placement.md).

Exit 0 ok, 2 user mistake (one line on stderr), 1 ONNX parity failure. Writes into ``--out`` (a version
directory): ``q_table.json``, ``q_table.onnx``, ``model_card.json``, ``README.md`` (the model card),
``training_curve.png``, ``curve.json``; and points ``<out>/../CURRENT`` at it unless ``--no-set-current``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from simulator.arena.arrivals import TraceTask
from simulator.arena.learned import CARD_FILE, FEATURE_SETS, ONNX_FILE, TABLE_FILE
from training import cli_args
from training.placement.train import EpisodeResult, TrainConfig, run_episode, train
from training.progress import Progress

PROG: Final = "borgctl train placement"
QUICK_EPISODES: Final = 80
FULL_EPISODES: Final = 300
VALIDATION_SEEDS: Final = 3
PARITY_TOL: Final = 1e-5


def build_parser() -> cli_args.Parser:
    p = cli_args.Parser(prog=PROG,
                        description="Q-learning placement in the offline arena on the regime model's training kinds.")
    p.add_argument("--out", type=Path, required=True, help="version directory, e.g. models/placement/<version>")
    p.add_argument("--episodes", type=int, default=None,
                   help=f"arena episodes (default {FULL_EPISODES}; {QUICK_EPISODES} with --quick)")
    cli_args.add_seed(p, 1, "exploration and arrival seed")
    cli_args.add_quick(p, f"{QUICK_EPISODES} episodes (< 10 min on 2 cores)")
    p.add_argument("--features", choices=FEATURE_SETS, default="extender+pods",
                   help="state: the extender's inputs only, or plus the classes already on the node")
    p.add_argument("--nodes", type=int, default=20, help="arena nodes per episode")
    p.add_argument("--horizon-s", type=float, default=1800.0, help="arena seconds of arrivals per episode")
    p.add_argument("--util-weight", type=float, default=0.1, help="reward per unit of node CPU packed onto")
    p.add_argument("--task-events", type=Path, default=None,
                   help="with --arrivals trace: Google 2011 task_events directory "
                        "(default $BORG_DATA_DIR/google2011/task_events)")
    p.add_argument("--first-part", type=int, default=2,
                   help="first trace part trained on (eval arena --quick reads parts 0-1)")
    p.add_argument("--parts", type=int, default=8, help="trace parts trained on, one per episode in turn")
    p.add_argument("--arrivals", choices=("synthetic", "trace"), default="synthetic",
                   help="generated tasks (default) or trace parts --first-part.. (--task-events)")
    p.add_argument("--regime-model", type=Path, default=cli_args.REPO_ROOT / "models" / "regime",
                   help="regime model root (its CURRENT) or version: its train/held-out kinds split")
    cli_args.add_no_set_current(p, "do not point <out>/../CURRENT at --out")
    cli_args.add_quiet(p, short=True)
    return p


def _plot(curve: Sequence[EpisodeResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(1, len(curve) + 1)
    r = np.asarray([c.mean_reward for c in curve])
    v = np.asarray([c.slo_violation_task_s for c in curve])
    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    w = max(1, len(curve) // 10)
    smooth = np.convolve(r, np.ones(w) / w, mode="valid")
    a.plot(x, r, ".", alpha=0.5, label="episode")
    a.plot(x[w - 1:], smooth, "-", label=f"mean of {w}")
    a.set_ylabel("reward / placement")
    a.legend()
    b.plot(x, v, ".", alpha=0.6)
    b.set_ylabel("SLO-violation task-s")
    b.set_xlabel("episode (ε decays linearly)")
    a.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _card_md(card: dict[str, Any]) -> str:
    v = card["validation"]
    rows = "\n".join(f"| {s} | {g['reward']:+.4f} | {rr['reward']:+.4f} | {g['slo_violation_task_s']:.0f} | "
                     f"{rr['slo_violation_task_s']:.0f} | {g['useful_cpu_utilisation']:.3f} | "
                     f"{rr['useful_cpu_utilisation']:.3f} |"
                     for s, g, rr in zip(v["seeds"], v["greedy"], v["random"], strict=True))
    t = card["training"]
    return f"""# Placement Q-table {card['version']}

Tabular Q-learning of pod placement in the offline arena (issue 22; docs/placement.md).

* Command: `{card['command']}`
* State (`{card['features']}`): see `simulator/arena/learned.py` `state_key`; {card['states']} states visited.
* Action: the node to bind among those passing the kube-scheduler Filter (highest Q; ties and unseen
  states by the kube-default score).
* Reward: minus slowdown-weighted SLO-violation seconds the placement caused (to the pod and its
  co-runners, over its lifetime) / {t['cost_scale_s']:.0f} s, plus {t['util_weight']} × the node's requested
  CPU fraction before the pod. Discount 0.
* Training kinds (the regime model {card['regime_model']}'s train kinds): {', '.join(card['train_kinds'])}.
  **Never trained on** (the arena's evaluation kinds): {', '.join(card['heldout_kinds'])}.
* Arrivals: {card['arrivals']}, offered load {t['target_load']},
  {t['nodes']} nodes, {t['horizon_s']:.0f} s per episode, arrival seeds {t['seed']}·1000 + episode.
* {t['episodes']} episodes, ε {t['epsilon_start']} → {t['epsilon_end']}, seed {t['seed']},
  {card['train_wall_s']:.0f} s wall.
* Export: `q_table.onnx` (one ai.onnx.ml LabelEncoder: state key → Q, unseen → mean), parity with
  `q_table.json` {card['onnx_parity_max_abs']:.2e}.

![training curve](training_curve.png)

Validation on training kinds, arrival seeds never used in training (same parts in turn as training:
a check of learning, not of generalisation; greedy table vs uniform random among feasible nodes, same
arrivals):

| arrival seed | reward greedy | reward random | SLO-viol. task-s greedy | random | useful util greedy | random |
|---|---|---|---|---|---|---|
{rows}

Evaluation on the held-out kinds: `borgctl eval arena --policies kube-default,random,extender,learned,oracle
--quick --seed S --out DIR` (docs/placement.md).
"""


def run(args: argparse.Namespace, command: str) -> int:
    from services.regime.model import load_regime_model
    from services.runtime.model_watch import resolve
    from training.placement.export import export_onnx, parity_error
    from training.placement.train import trace_parts
    from training.settings import google2011_dir

    progress = Progress(enabled=not args.quiet)
    episodes = args.episodes if args.episodes is not None else (QUICK_EPISODES if args.quick else FULL_EPISODES)
    if episodes < 1 or args.nodes < 1 or args.horizon_s <= 0:
        raise cli_args.UsageError("--episodes, --nodes and --horizon-s must be positive")
    regime = load_regime_model(resolve(args.regime_model))
    data = regime.card.get("data", {})
    train_kinds = list(data.get("train_kinds") or [])
    heldout = list(data.get("heldout_kinds") or [])
    if not train_kinds or not heldout:
        raise cli_args.UsageError(f"regime model {regime.version} names no train/held-out kinds (data.train_kinds)")
    cfg = TrainConfig(episodes=episodes, seed=args.seed, features=args.features, nodes=args.nodes,
                      horizon_s=args.horizon_s, util_weight=args.util_weight)
    progress(f"regime model {regime.version}; training kinds {', '.join(train_kinds)}; "
             f"held out (never seen): {', '.join(heldout)}")
    parts: list[list[TraceTask]] = []
    source = f"synthetic_tasks ({cfg.jobs} jobs per episode)"
    if args.arrivals == "trace":
        events = args.task_events or google2011_dir() / "task_events"
        if not events.is_dir():
            raise cli_args.UsageError(f"task_events directory {events} not found (set BORG_DATA_DIR, --task-events, "
                             "or --arrivals synthetic)")
        if args.first_part < 0 or args.parts < 1:
            raise cli_args.UsageError("--first-part must be >= 0 and --parts >= 1")
        progress(f"reading parts {args.first_part}..{args.first_part + args.parts - 1} of {events}")
        try:
            parts = trace_parts(events, args.first_part, args.parts)
        except ValueError as exc:
            raise cli_args.UsageError(str(exc)) from None
        source = (f"Google 2011 task_events parts {args.first_part}-{args.first_part + args.parts - 1} "
                  f"of {events} (one part per episode)")
    started = time.perf_counter()
    model, curve = train(cfg, regime, train_kinds, progress, parts)
    wall = time.perf_counter() - started
    greedy: list[dict[str, float]] = []
    rand: list[dict[str, float]] = []
    seeds = [args.seed * 1000 + 900 + k for k in range(VALIDATION_SEEDS)]
    for k, s in enumerate(seeds):
        tasks = parts[k % len(parts)] if parts else None
        for eps, sink in ((0.0, greedy), (1.0, rand)):
            r, _, viol, useful = run_episode(model, regime, cfg, train_kinds, s, eps, learn=False, tasks=tasks)
            sink.append({"reward": r, "slo_violation_task_s": viol, "useful_cpu_utilisation": useful})
        progress(f"validation seed {s}: greedy {greedy[-1]['reward']:+.4f} ({greedy[-1]['slo_violation_task_s']:.0f}"
                 f" task-s), random {rand[-1]['reward']:+.4f} ({rand[-1]['slo_violation_task_s']:.0f} task-s)")
    final: Path = args.out
    out = final.parent / f".{final.name}.partial"  # a reader never sees a half-written version
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / TABLE_FILE).write_bytes(model.to_json())
    export_onnx(model, out / ONNX_FILE)
    parity = parity_error(model, out / ONNX_FILE)
    if parity > PARITY_TOL:
        print(f"train placement: ONNX parity {parity:.2e} > {PARITY_TOL}", file=sys.stderr)
        return 1
    card: dict[str, Any] = {
        "model": "placement", "version": final.name, "command": command, "features": model.features,
        "states": len(model.values), "regime_model": regime.version, "train_kinds": train_kinds,
        "heldout_kinds": heldout, "arrivals": source, "training": asdict(cfg),
        "train_wall_s": wall, "onnx_parity_max_abs": parity,
        "validation": {"kinds": "train", "seeds": seeds, "greedy": greedy, "random": rand},
    }
    (out / CARD_FILE).write_bytes(orjson.dumps(card, option=orjson.OPT_INDENT_2) + b"\n")
    (out / "curve.json").write_bytes(orjson.dumps([asdict(c) for c in curve], option=orjson.OPT_INDENT_2) + b"\n")
    _plot(curve, out / "training_curve.png", f"placement Q-learning, seed {args.seed}, {model.features}")
    (out / "README.md").write_text(_card_md(card))
    if final.exists():
        shutil.rmtree(final)
    out.rename(final)
    if not args.no_set_current:
        (final.parent / "CURRENT").write_text(final.name + "\n")
    progress(f"wrote {final} ({len(model.values)} states, ONNX parity {parity:.1e})")
    return 0


def train_placement(argv: Sequence[str]) -> int:
    """Entry point wired into ``borgctl train placement``; returns an exit code."""
    args = list(argv)
    command = cli_args.command_line(PROG, args)
    return cli_args.run_cli("train placement", lambda: run(build_parser().parse_args(args), command), error_prefix="")


def main() -> int:
    return train_placement(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
