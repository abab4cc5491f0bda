"""Is there a signal for the large moves? Correlations measured on the TRAINING VMs only.

``python -m training.forecast.signals --data DIR --out FILE``: the forecaster's error against persistence is mostly
rare large moves (docs/forecast.md, "Why no recipe comes near 0.8"). A median forecast can only anticipate a move
that something known at forecast time correlates with. This measures, per resource and horizon S (buckets), the
correlation of the change ``x[k+S] − x[k]`` with what the stage could know at bucket k:

* ``day_ago`` — the change the VM made over the same interval a day earlier (``x[k+S−288] − x[k−288]``);
* ``hour_ago`` — the same an hour earlier (``x[k+S−12] − x[k−12]``): hourly cron-like work;
* ``fleet_past`` — the mean change of the other VMs over the last S buckets (``x[k] − x[k−S]``): a fleet-wide
  wave that reaches some VMs before others;
* ``own_past`` — the VM's own change over the last S buckets (momentum or mean reversion);

each over all points and over the points whose move exceeds ``--jump-pp`` (default 5 pp), plus how the large moves
spread over the 12 buckets of the hour (``jumps_by_bucket_of_hour``; a flat spread = no clock-driven jumps). The VMs
``borgctl train forecast`` holds out (same seeded split) are never read, and only buckets whose target lies before
the train end are used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from featurelib.load_features import DAY, HORIZON_STEPS, RESOURCES, STEP_S, bucketize
from training.errors import IngestError
from training.forecast import bitbrains
from training.forecast.train import DEFAULT_TRAIN_END, split_vms

HOUR: Final = 3600 // STEP_S
SIGNALS: Final = ("day_ago", "hour_ago", "fleet_past", "own_past")


def align(series: Mapping[str, tuple[int, np.ndarray]]) -> tuple[int, np.ndarray]:
    """``{vm: (first bucket, [n, 2] bucket means)}`` → (first bucket, float64 [vms, buckets, 2]; NaN = no sample)."""
    if not series:
        raise ValueError("no series to align")
    lo = min(first for first, _ in series.values())
    hi = max(first + len(b) for first, b in series.values())
    out = np.full((len(series), hi - lo, len(RESOURCES)), np.nan)
    for i, (first, b) in enumerate(series.values()):
        out[i, first - lo : first - lo + len(b)] = b
    return lo, out


def _change(x: np.ndarray, k0: int, steps: int) -> np.ndarray:
    """``x[:, k + steps] − x[:, k]`` for k = k0 … n − 1 − steps (NaN where k < 0)."""
    n = x.shape[1]
    ks = np.arange(k0, n - steps)
    out = np.full((x.shape[0], len(ks)), np.nan)
    ok = ks >= 0
    out[:, ok] = x[:, ks[ok] + steps] - x[:, ks[ok]]
    return out


def _corr(a: np.ndarray, b: np.ndarray) -> float | None:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.std(a[ok]) == 0 or np.std(b[ok]) == 0:
        return None
    return round(float(np.corrcoef(a[ok], b[ok])[0, 1]), 4)


def signal_table(x: np.ndarray, first_bucket: int, steps: int, jump_pp: float, last_target: int | None = None
                 ) -> dict[str, Any]:
    """Correlations for one resource (``x``: [vms, buckets]) and horizon ``steps``; targets at bucket index
    ≤ ``last_target`` only (default: all)."""
    n = x.shape[1]
    end = n if last_target is None else min(n, last_target + 1)
    k = np.arange(0, end - steps)  # forecast points whose target is inside the window
    target = x[:, k + steps] - x[:, k]
    signals = {
        "day_ago": _change(x, -DAY, steps)[:, : len(k)],
        "hour_ago": _change(x, -HOUR, steps)[:, : len(k)],
        "own_past": _change(x, -steps, steps)[:, : len(k)],
    }
    past = signals["own_past"]
    valid = np.isfinite(past)
    own = np.where(valid, past, 0.0)
    others = valid.sum(axis=0) - valid  # leave the VM itself out: its own past is ``own_past``
    with np.errstate(invalid="ignore", divide="ignore"):
        signals["fleet_past"] = np.where(others > 0, (own.sum(axis=0) - own) / others, np.nan)
    big = np.isfinite(target) & (np.abs(target) > jump_pp)
    out: dict[str, Any] = {"points": int(np.isfinite(target).sum()), "jumps": int(big.sum())}
    for name in SIGNALS:
        s = signals[name]
        out[name] = {"corr": _corr(target, s), "corr_on_jumps": _corr(target[big], s[big])}
    bucket_of_hour = np.broadcast_to((first_bucket + k + steps) % HOUR, target.shape)[big]
    counts = np.bincount(bucket_of_hour, minlength=HOUR)
    out["jumps_by_bucket_of_hour"] = counts.tolist()
    out["jumps_max_over_mean_bucket"] = round(float(counts.max() / counts.mean()), 3) if counts.sum() else None
    return out


def measure(series: Mapping[str, tuple[int, np.ndarray]], jump_pp: float, last_target_bucket: int | None = None
            ) -> dict[str, dict[str, Any]]:
    first, x = align(series)
    last = None if last_target_bucket is None else last_target_bucket - first
    return {f"{RESOURCES[r]} {HORIZON_STEPS[h] * STEP_S // 60}min":
            signal_table(x[:, :, r], first, HORIZON_STEPS[h], jump_pp, last)
            for r in range(len(RESOURCES)) for h in range(len(HORIZON_STEPS))}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.forecast.signals", description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, required=True, help="Bitbrains-layout directory (<vm>.csv[.gz], months)")
    p.add_argument("--out", type=Path, required=True, help="JSON report")
    p.add_argument("--seed", type=int, default=0, help="the trainer's VM split seed (its held-out VMs are skipped)")
    p.add_argument("--max-vms", type=int, default=None, help="read at most this many training VMs (seeded pick)")
    p.add_argument("--jump-pp", type=float, default=5.0, help="a large move: more than this many percentage points")
    p.add_argument("--train-end", default=DEFAULT_TRAIN_END, help="last target time used (ISO 8601)")
    args = p.parse_args(argv)
    try:
        end_s = int(dt.datetime.fromisoformat(args.train_end).timestamp())
        files = bitbrains.vm_files(args.data)
        if not files:
            raise ValueError(f"{args.data}: no <vm>.csv[.gz] files")
        train, _held = split_vms(sorted(files), 0.2, args.seed)  # the held-out VMs are never read
        if args.max_vms is not None and len(train) > args.max_vms:
            train = sorted(np.random.default_rng(args.seed + 1).choice(train, args.max_vms, replace=False).tolist())
        series: dict[str, tuple[int, np.ndarray]] = {}
        for i, vm in enumerate(train):
            s = bitbrains.load_series(vm, files[vm])
            series[vm] = bucketize(s.time_s, s.cpu_pct, s.mem_pct)
            if (i + 1) % 50 == 0 or i + 1 == len(train):
                print(f"signals: read {i + 1}/{len(train)} training VMs", file=sys.stderr)
    except (OSError, ValueError, IngestError) as exc:  # each names the file (and line)
        print(f"signals: {exc}", file=sys.stderr)
        return 2
    report = {"command": "python -m training.forecast.signals " + " ".join(sys.argv[1:] if argv is None else argv),
              "vms": len(series), "jump_pp": args.jump_pp, "train_end": args.train_end,
              "cases": measure(series, args.jump_pp, end_s // STEP_S - 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    for case, row in report["cases"].items():
        corr = "  ".join(f"{s} {row[s]['corr']}/{row[s]['corr_on_jumps']}" for s in SIGNALS)
        print(f"{case:>12}: {corr}  jump-hour max/mean {row['jumps_max_over_mean_bucket']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
