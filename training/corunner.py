"""The extender's co-runner table from the regime model's training kinds (``python -m training.corunner``).

``table(kinds)[c][j]`` = mean slowdown of a class-``c`` pod beside one co-runner of class ``j``: the
simulator's interference labels (:func:`simulator.workloads.corunner_slowdowns`, the labels the regime
model's interference heads learn from) averaged over the given kinds of class ``j`` and intensities
``INTENSITIES`` (the arena's uniform 0.5–1). Pass only training kinds: the held-out kinds are what the arena
evaluates on. ``services/scheduler_extender/corunner.py`` ships the result; a unit test checks it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import orjson

from contracts.models import WORKLOAD_CLASSES
from simulator.workloads import KINDS, corunner_slowdowns

ROOT: Final = Path(__file__).resolve().parents[1]
INTENSITIES: Final = np.linspace(0.5, 1.0, 51)


def table(kinds: Sequence[str], decimals: int = 3) -> tuple[tuple[float, ...], ...]:
    """Rows: the pod slowed; columns: the co-runner's class (WORKLOAD_CLASSES order)."""
    out = np.ones((len(WORKLOAD_CLASSES), len(WORKLOAD_CLASSES)))
    for j, cls in enumerate(WORKLOAD_CLASSES):
        members = [k for k in kinds if KINDS[k].workload_class == cls]
        if not members:
            raise ValueError(f"no kind of class {cls} among {list(kinds)}")
        pressures = np.array([np.asarray(KINDS[k].pressure) * i for k in members for i in INTENSITIES])
        out[:, j] = corunner_slowdowns(pressures).mean(axis=1)
    return tuple(tuple(round(float(v), decimals) for v in row) for row in out)


def pressure_guess(kinds: Sequence[str], decimals: int = 4) -> tuple[tuple[float, ...], ...]:
    """Per class (WORKLOAD_CLASSES order): mean pressure of the given kinds at the mean intensity (0.75): the
    load term's guess for a pod whose own counters are not read yet (``simulator.workloads.CLASS_PRESSURE_GUESS``)."""
    out = []
    for cls in WORKLOAD_CLASSES:
        members = [k for k in kinds if KINDS[k].workload_class == cls]
        if not members:
            raise ValueError(f"no kind of class {cls} among {list(kinds)}")
        mean = np.mean([KINDS[k].pressure for k in members], axis=0) * float(INTENSITIES.mean())
        out.append(tuple(round(float(v), decimals) for v in mean))
    return tuple(out)


def card_kinds(model_root: Path, key: str = "train_kinds") -> list[str]:
    """The kinds a regime model's card names under ``data.<key>`` (its root's CURRENT, or a version directory)."""
    from services.runtime.model_watch import resolve

    card = orjson.loads((resolve(model_root) / "model_card.json").read_bytes())
    kinds = list(card.get("data", {}).get(key) or [])
    if not kinds:
        raise ValueError(f"{model_root}: the card names no data.{key}")
    return kinds


def train_kinds(model_root: Path) -> list[str]:
    """The training kinds named by a regime model's card."""
    return card_kinds(model_root, "train_kinds")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.corunner", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "regime", help="regime model root or version")
    args = p.parse_args(argv)
    kinds = train_kinds(args.model)
    print(f"# training kinds: {', '.join(kinds)}; rows/columns: {', '.join(WORKLOAD_CLASSES)}")
    for row in table(kinds):
        print(f"    ({', '.join(f'{v:.3f}' for v in row)}),")
    print("# CLASS_PRESSURE_GUESS (llc, membw, core, frontend per class)")
    for row in pressure_guess(kinds):
        print(f"    ({', '.join(f'{v:.4g}' for v in row)}),")
    return 0


if __name__ == "__main__":
    sys.exit(main())
