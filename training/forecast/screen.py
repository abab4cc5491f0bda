"""Screen forecast recipes on the TRAINING VMs only, before anything is scored on the held-out VMs.

``python -m training.forecast.screen --data DIR --out FILE``: the VMs ``borgctl train forecast`` holds
out (same seeded split) are never read. The training VMs are split again: a seeded quarter is the
validation group (never fitted on); the others fit on targets up to ``--val-start`` (default
2013-08-15) and early-stop on their targets from then to the train end; the validation group is scored on
its targets in that same late window. So the figures are "VMs never fitted, a later window", like the
report, but from training-window data only; the 80 held-out VMs stay untouched for the final check.

Candidates (``--candidates``, comma-separated):

* ``base`` — the shipped recipe (36 features of featurelib.load_features, ``reg:quantileerror``, change
  from the last bucket);
* ``abs`` — ``reg:absoluteerror`` for the p50 (WAPE is an L1 metric);
* ``norm`` — per-VM normalisation: target ``(y - last) / (mean_1d + 1)`` weighted by ``mean_1d + 1``
  (same L1 objective in percent, trees split on relative moves);
* ``daily`` — plus features computable from one day of history: time since the last spike (bucket
  > 2 × its day mean + 2 pp), share of the last hour above the day mean, lags 24 and 36, and the change
  the series made yesterday between now and the target time (``day_hS - day_h0``);
* ``weekly`` — plus same time last week (at now and at each target), its change, and the week's mean;
* ``all`` — ``daily`` + ``weekly``;
* ``io`` / ``all_io`` — ``base`` / ``all`` plus the trace's disk and network throughput (``log1p`` of read +
  write and of received + transmitted KB/s: the last bucket, lags 1–3, means of the last hour and day). Not in
  ``NodeState``, so not servable as is: this asks whether such an input would be worth adding.

The extra features are computed here only (numpy); they are candidates, not served inputs. Rows per
fitting VM: ``--rows-per-vm`` (the shipped recipe samples 400).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson
import xgboost as xgb

from featurelib.load_features import (
    DAY,
    HORIZON_STEPS,
    LOAD_FEATURE_INDEX,
    RESOURCES,
    STEP_S,
    bucketize,
    load_features_matrix,
)
from training.forecast import bitbrains
from training.forecast.metrics import case_name, wape
from training.forecast.model import Params
from training.forecast.train import DEFAULT_TRAIN_END, split_vms

WEEK: Final = 7 * DAY
CANDIDATES: Final = ("base", "abs", "norm", "daily", "weekly", "all", "io", "all_io")
IO_CANDIDATES: Final = frozenset({"io", "all_io"})
DEFAULT_VAL_START: Final = "2013-08-15T00:00:00+00:00"


@dataclass(frozen=True, slots=True)
class Rows:
    x: np.ndarray
    """float64 [n, 36 + extra]: featurelib features, then the candidate extras (see ``EXTRA_NAMES``)"""
    y: np.ndarray
    """[n, resources, horizons]"""


def _shift(x: np.ndarray, rows: np.ndarray, j: int) -> np.ndarray:
    src = rows - j
    ok = src >= 0
    out = np.full(len(rows), np.nan)
    out[ok] = x[src[ok]]
    return out


def _means_back(x: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
    """``mean_back(at, width)``: the mean of the valid buckets ``at - width + 1 … at`` of ``x`` (NaN if none)."""
    csum = np.r_[0.0, np.cumsum(np.nan_to_num(x))]
    ccnt = np.r_[0, np.cumsum(~np.isnan(x))]

    def mean_back(at: np.ndarray, width: int) -> np.ndarray:
        lo = np.maximum(at + 1 - width, 0)
        cnt = ccnt[at + 1] - ccnt[lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(cnt > 0, (csum[at + 1] - csum[lo]) / np.maximum(cnt, 1), np.nan)

    return mean_back


def _extra(x: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Candidate features of one resource at ``rows``; reads buckets <= row only."""
    n = len(x)
    idx = np.arange(n)
    mean_back = _means_back(x)
    day_mean = mean_back(idx, DAY)
    with np.errstate(invalid="ignore"):
        spike = x > 2.0 * day_mean + 2.0
        above = np.r_[0.0, np.cumsum((x > day_mean).astype(np.float64))]
    last_spike = np.maximum.accumulate(np.where(spike, idx, -1))[rows]
    out = {"since_spike": np.where(last_spike >= 0, rows - last_spike, 10_000).astype(np.float64),
           "share_above_1h": (above[rows + 1] - above[np.maximum(rows + 1 - 12, 0)]) / 12.0,
           "lag24": _shift(x, rows, 24), "lag36": _shift(x, rows, 36),
           "week_h0": _shift(x, rows, WEEK), "mean_1w": mean_back(rows, WEEK)}
    for s in HORIZON_STEPS:
        out[f"day_delta_h{s}"] = _shift(x, rows, DAY - s) - _shift(x, rows, DAY)
        out[f"week_h{s}"] = _shift(x, rows, WEEK - s)
        out[f"week_delta_h{s}"] = out[f"week_h{s}"] - out["week_h0"]
    return out


EXTRA_NAMES: Final = tuple(f"{r}_{k}" for r in RESOURCES for k in _extra(np.zeros(1), np.zeros(1, np.int64)))
DAILY: Final = ("since_spike", "share_above_1h", "lag24", "lag36", *(f"day_delta_h{s}" for s in HORIZON_STEPS))


IO_NAMES: Final = tuple(f"{k}_{s}" for k in ("disk", "net") for s in ("last", "lag1", "lag2", "lag3", "mean_1h",
                                                                         "mean_1d"))


def io_features(first_io: int, io: np.ndarray, first: int, n: int, rows: np.ndarray) -> np.ndarray:
    """``IO_NAMES`` at ``rows`` of a VM whose load buckets start at ``first`` (``n`` of them); ``io``: its
    [buckets, 2] disk / network bucket means starting at ``first_io``. Reads buckets <= row only."""
    grid = np.full((n, 2), np.nan)
    lo, hi = max(first_io, first), min(first_io + len(io), first + n)
    if hi > lo:
        grid[lo - first : hi - first] = io[lo - first_io : hi - first_io]
    cols = []
    for j in range(2):
        x = grid[:, j]
        mean_back = _means_back(x)
        cols += [x[rows], _shift(x, rows, 1), _shift(x, rows, 2), _shift(x, rows, 3), mean_back(rows, 12),
                 mean_back(rows, DAY)]
    return np.stack(cols, axis=1) if len(rows) else np.zeros((0, len(IO_NAMES)))


def _columns(candidate: str) -> np.ndarray:
    """Column indices of the feature matrix a candidate reads (the I/O columns follow the extras)."""
    base = list(range(len(LOAD_FEATURE_INDEX)))
    want: set[str] = set()
    if candidate in ("daily", "all", "all_io"):
        want |= set(DAILY)
    if candidate in ("weekly", "all", "all_io"):
        want |= {k.split("_", 1)[1] for k in EXTRA_NAMES if "week" in k or k.endswith("_1w")}
    extra = [len(base) + i for i, k in enumerate(EXTRA_NAMES) if k.split("_", 1)[1] in want]
    io = (list(range(len(base) + len(EXTRA_NAMES), len(base) + len(EXTRA_NAMES) + len(IO_NAMES)))
          if candidate in IO_CANDIDATES else [])
    return np.array(base + extra + io, dtype=np.int64)


def vm_rows(first: int, buckets: np.ndarray, pick: np.ndarray) -> Rows:
    n = len(buckets)
    y = np.full((len(pick), len(RESOURCES), len(HORIZON_STEPS)), np.nan)
    for h, s in enumerate(HORIZON_STEPS):
        src = pick + s
        good = src < n
        y[good, :, h] = buckets[src[good]]
    extras = [_extra(buckets[:, r], pick) for r in range(len(RESOURCES))]
    ex = np.stack([extras[r][k.split("_", 1)[1]] for r in range(len(RESOURCES)) for k in EXTRA_NAMES
                   if k.startswith(RESOURCES[r] + "_")], axis=1) if len(pick) else np.zeros((0, len(EXTRA_NAMES)))
    return Rows(np.concatenate([load_features_matrix(first, buckets, pick), ex], axis=1), y)


def _concat(parts: list[Rows], with_io: bool = False) -> Rows:
    width = len(LOAD_FEATURE_INDEX) + len(EXTRA_NAMES) + (len(IO_NAMES) if with_io else 0)
    if not parts:
        return Rows(np.zeros((0, width)), np.zeros((0, len(RESOURCES), len(HORIZON_STEPS))))
    return Rows(np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]))


@dataclass(frozen=True, slots=True)
class Split:
    fit: Rows
    stop: Rows
    val: Rows
    vms: dict[str, int]


def build_split(data: Path, seed: int, val_start_s: int, train_end_s: int, rows_per_vm: int,
                stop_rows_per_vm: int = 100, max_vms: int | None = None, with_io: bool = False) -> Split:
    """``with_io``: the rows carry ``IO_NAMES`` after the extras (``bitbrains.load_io``)."""
    files = bitbrains.vm_files(data)
    train_vms, _held = split_vms(sorted(files), 0.2, seed)  # the held-out VMs are never read
    if max_vms is not None:
        train_vms = train_vms[:max_vms]
    perm = np.random.default_rng(seed + 123).permutation(len(train_vms))
    val_vms = {train_vms[i] for i in perm[: max(1, len(train_vms) // 4)]}
    rng = np.random.default_rng(seed)
    last = HORIZON_STEPS[-1] * STEP_S
    fit, stop, val = [], [], []
    for vm in train_vms:
        s = bitbrains.load_series(vm, files[vm])
        first, buckets = bucketize(s.time_s, s.cpu_pct, s.mem_pct)
        if not len(buckets):
            continue
        now_s = (np.arange(len(buckets)) + first + 1) * STEP_S
        ok = ~np.isnan(buckets).any(axis=1)
        late = ok & (now_s + last > val_start_s) & (now_s + last <= train_end_s)
        rows_of = _row_maker(files[vm], first, buckets, with_io)
        if vm in val_vms:
            val.append(rows_of(np.flatnonzero(late)))
            continue
        early = np.flatnonzero(ok & (now_s + last <= val_start_s))
        late_idx = np.flatnonzero(late)
        fit.append(rows_of(np.sort(rng.choice(early, min(rows_per_vm, len(early)), replace=False))))
        stop.append(rows_of(np.sort(rng.choice(late_idx, min(stop_rows_per_vm, len(late_idx)), replace=False))))
    return Split(_concat(fit, with_io), _concat(stop, with_io), _concat(val, with_io),
                 {"fit": len(train_vms) - len(val_vms), "validation": len(val_vms)})


def _row_maker(files: list[Path], first: int, buckets: np.ndarray, with_io: bool) -> Callable[[np.ndarray], Rows]:
    """One VM's rows at the picked buckets, with its I/O columns when ``with_io``."""
    if not with_io:
        return lambda pick: vm_rows(first, buckets, pick)
    t, disk, net = bitbrains.load_io(files)
    first_io, io = bucketize(t, disk, net)  # the same 300 s buckets as the load (means of log1p KB/s)

    def rows_of(pick: np.ndarray) -> Rows:
        r = vm_rows(first, buckets, pick)
        return Rows(np.concatenate([r.x, io_features(first_io, io, first, len(buckets), pick)], axis=1), r.y)

    return rows_of


def _scale(x: np.ndarray, r: int) -> np.ndarray:
    day_mean: np.ndarray = np.nan_to_num(x[:, LOAD_FEATURE_INDEX[f"{RESOURCES[r]}_mean_1d"]], nan=0.0) + 1.0
    return day_mean


def fit_predict(split: Split, candidate: str, r: int, h: int, q: float, params: Params, seed: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(validation x, validation y, forecast in percent, rounds) of one case."""
    cols = _columns(candidate)
    col = LOAD_FEATURE_INDEX[f"{RESOURCES[r]}_last"]

    def part(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        y = rows.y[:, r, h]
        ok = ~np.isnan(y)
        return rows.x[ok], y[ok]

    (xf, yf), (xs, ys), (xv, yv) = part(split.fit), part(split.stop), part(split.val)
    norm = candidate == "norm"

    def matrix(x: np.ndarray, y: np.ndarray) -> xgb.DMatrix:
        delta = y - x[:, col]
        if norm:
            return xgb.DMatrix(x[:, cols].astype(np.float32), label=delta / _scale(x, r), weight=_scale(x, r))
        return xgb.DMatrix(x[:, cols].astype(np.float32), label=delta)

    config: dict[str, Any] = {"tree_method": "hist", "max_depth": params.depth, "eta": params.eta,
                              "min_child_weight": params.min_child_weight, "subsample": params.subsample,
                              "colsample_bytree": params.colsample, "nthread": params.threads, "seed": seed,
                              "base_score": 0.0}
    if candidate == "abs" and q == 0.5:
        config["objective"] = "reg:absoluteerror"
    else:
        config.update(objective="reg:quantileerror", quantile_alpha=q)
    booster = xgb.train(config, matrix(xf, yf), num_boost_round=params.rounds, evals=[(matrix(xs, ys), "stop")],
                        early_stopping_rounds=params.patience, verbose_eval=False)
    rounds = int(booster.best_iteration) + 1
    delta = booster.predict(xgb.DMatrix(xv[:, cols].astype(np.float32)), iteration_range=(0, rounds))
    p = delta.astype(np.float64) * (_scale(xv, r) if norm else 1.0) + xv[:, col]
    return xv, yv, p, rounds


def screen(split: Split, candidates: Sequence[str], cases: Sequence[tuple[int, int]], params: Params, seed: int,
           coverage: bool, progress: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cand in candidates:
        out[cand] = {}
        for r, h in cases:
            t0 = time.perf_counter()
            xv, yv, p50, rounds = fit_predict(split, cand, r, h, 0.5, params, seed)
            col = LOAD_FEATURE_INDEX[f"{RESOURCES[r]}_last"]
            day = xv[:, LOAD_FEATURE_INDEX[f"{RESOURCES[r]}_day_h{HORIZON_STEPS[h]}"]]
            base = {"persistence": wape(yv, xv[:, col]),
                    "moving_average_1h": wape(yv, xv[:, LOAD_FEATURE_INDEX[f"{RESOURCES[r]}_mean_1h"]]),
                    "seasonal_naive": wape(yv, np.where(np.isnan(day), xv[:, col], day))}
            w = wape(yv, p50)
            valid = [v for v in base.values() if v is not None]
            entry: dict[str, Any] = {"points": len(yv), "wape": w, "rounds": rounds,
                                     **{f"wape_{k}": v for k, v in base.items()},
                                     "ratio_to_best_baseline": None if w is None or not valid else w / min(valid)}
            if coverage:
                _, _, p90, _ = fit_predict(split, cand, r, h, 0.9, params, seed)
                entry["p90_coverage"] = float(np.mean(yv <= np.maximum(p50, p90)))
            out[cand][case_name(r, h)] = entry
            if progress:
                ratio = entry["ratio_to_best_baseline"]
                print(f"{cand} {case_name(r, h)}: wape {w:.4f} ratio {ratio:.3f} ({rounds} rounds, "
                      f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return out


def error_structure(rows: Rows, jump_pp: float = 5.0) -> dict[str, dict[str, float]]:
    """Where persistence's error comes from on ``rows``: the share of its absolute error from jumps larger
    than ``jump_pp``, how many points those are, and how well yesterday's change over the same interval
    (``day_hS - day_h0``) correlates with the jump (the seasonal signal a model could use)."""
    out: dict[str, dict[str, float]] = {}
    for r in range(len(RESOURCES)):
        for h, s in enumerate(HORIZON_STEPS):
            y = rows.y[:, r, h]
            ok = ~np.isnan(y)
            x = rows.x[ok]
            jump = y[ok] - x[:, LOAD_FEATURE_INDEX[f"{RESOURCES[r]}_last"]]
            err = np.abs(jump)
            big = err > jump_pp
            name = RESOURCES[r]
            yesterday = x[:, LOAD_FEATURE_INDEX[f"{name}_day_h{s}"]] - x[:, LOAD_FEATURE_INDEX[f"{name}_day_h0"]]
            both = ~np.isnan(yesterday)
            with np.errstate(invalid="ignore", divide="ignore"):  # constant input: NaN, not a warning
                corr = float(np.corrcoef(jump[both], yesterday[both])[0, 1]) if both.sum() > 2 else float("nan")
            out[case_name(r, h)] = {"error_share_of_big_jumps": float(err[big].sum() / max(err.sum(), 1e-12)),
                                    "share_of_points_with_big_jumps": float(big.mean()) if len(big) else 0.0,
                                    "corr_jump_vs_yesterday_change": corr, "jump_pp": jump_pp}
    return out


def _parse_cases(text: str) -> list[tuple[int, int]]:
    names = {case_name(r, h).replace(" ", ""): (r, h) for r in range(len(RESOURCES)) for h in range(len(HORIZON_STEPS))}
    if text == "all":
        return list(names.values())
    try:
        return [names[c.strip()] for c in text.split(",")]
    except KeyError as exc:
        raise SystemExit(f"unknown case {exc} (one of {', '.join(names)})") from None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.forecast.screen", description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="JSON report")
    p.add_argument("--candidates", default="base,daily",
                   help=f"comma-separated, of {', '.join(CANDIDATES)}; 'none' = only the persistence error structure")
    p.add_argument("--cases", default="all", help="e.g. cpu5min,cpu30min,memory15min (default all six)")
    p.add_argument("--rows-per-vm", type=int, default=400)
    p.add_argument("--max-vms", type=int, default=None, help="read only the first N training VMs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--coverage", action="store_true", help="also fit the p90 and report its coverage")
    args = p.parse_args(argv)
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip() not in ("", "none")]
    if unknown := [c for c in candidates if c not in CANDIDATES]:
        raise SystemExit(f"unknown candidate(s) {', '.join(unknown)} (one of {', '.join(CANDIDATES)})")
    val_start = int(dt.datetime.fromisoformat(DEFAULT_VAL_START).timestamp())
    end = int(dt.datetime.fromisoformat(DEFAULT_TRAIN_END).timestamp())
    split = build_split(args.data, args.seed, val_start, end, args.rows_per_vm, max_vms=args.max_vms,
                        with_io=bool(IO_CANDIDATES & set(candidates)))
    params = Params(rounds=args.rounds, threads=args.threads)
    results = screen(split, candidates, _parse_cases(args.cases), params, args.seed, args.coverage)
    doc = {"command": "python -m training.forecast.screen " + " ".join(sys.argv[1:] if argv is None else argv),
           "vms": split.vms, "rows": {"fit": len(split.fit.x), "early_stopping": len(split.stop.x),
                                      "validation": len(split.val.x)},
           "window": {"fit_targets_until": DEFAULT_VAL_START, "validation_targets": [DEFAULT_VAL_START,
                                                                                     DEFAULT_TRAIN_END]},
           "rows_per_vm": args.rows_per_vm, "persistence_error_structure": error_structure(split.val),
           "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    for cand, cases in results.items():
        print(cand, " ".join(f"{c}={m['ratio_to_best_baseline']:.3f}" for c, m in cases.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
