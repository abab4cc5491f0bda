"""The recipe screen (training/forecast/screen.py) reads only training VMs, and its candidate features no future."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from featurelib.load_features import DAY, N_LOAD_FEATURES
from tests.forecast_helpers import record_vm_reads
from training.forecast import bitbrains, screen
from training.forecast.synthetic import write_dataset
from training.forecast.train import split_vms


def test_candidate_features_read_no_future() -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 50, size=9 * DAY)
    x[rng.random(len(x)) < 0.05] = np.nan
    rows = np.arange(len(x))
    before = screen._extra(x, rows)
    k = 8 * DAY
    changed = x.copy()
    changed[k + 1:] = rng.uniform(0, 100, size=len(x) - k - 1)
    after = screen._extra(changed, rows)
    for name in before:
        np.testing.assert_array_equal(before[name][: k + 1], after[name][: k + 1], err_msg=name)
    # the weekly lag is exactly the bucket a week back
    assert before["week_h0"][7 * DAY + 5] == x[5] or np.isnan(x[5])
    assert np.isnan(before["week_h0"][7 * DAY - 1])


def test_screen_reads_training_vms_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_dataset(tmp_path / "data", vms=7, start="2013-08-13T00:00:00+00:00", days=19.0, seed=5)
    read = record_vm_reads(monkeypatch)
    out = tmp_path / "screen.json"
    code = screen.main(["--data", str(data), "--out", str(out), "--candidates", "base,daily", "--cases",
                        "cpu5min,memory30min", "--rows-per-vm", "80", "--rounds", "5"])
    assert code == 0
    train, held = split_vms(sorted(bitbrains.vm_files(data)), 0.2, 0)
    assert sorted(read) == train and not set(read) & set(held)
    doc = orjson.loads(out.read_bytes())
    assert doc["vms"] == {"fit": 5, "validation": 1}  # 7 VMs: 1 held out, 1 validation
    assert doc["rows"]["fit"] <= 5 * 80
    for cand in ("base", "daily"):
        for case in ("cpu 5min", "memory 30min"):
            m = doc["results"][cand][case]
            best = min(m[f"wape_{b}"] for b in ("persistence", "moving_average_1h", "seasonal_naive"))
            assert m["ratio_to_best_baseline"] == pytest.approx(m["wape"] / best)
            assert 0 < m["wape"] < 1 and m["points"] > 100


def test_columns_per_candidate() -> None:
    assert len(screen._columns("base")) == N_LOAD_FEATURES
    daily, weekly, both = (set(screen._columns(c).tolist()) for c in ("daily", "weekly", "all"))
    assert daily & weekly == set(range(N_LOAD_FEATURES))
    assert both == daily | weekly
    assert len(both) == N_LOAD_FEATURES + len(screen.EXTRA_NAMES)
    assert set(screen._columns("all_io").tolist()) == both | set(screen._columns("io").tolist())


def test_error_structure_counts_big_jumps() -> None:
    n = 10
    x = np.full((n, N_LOAD_FEATURES + len(screen.EXTRA_NAMES)), 10.0)
    y = np.full((n, 2, 3), 11.0)  # a 1 pp move everywhere ...
    y[0, :, :] = 30.0  # ... and one 20 pp jump: 20 of the 29 pp of persistence error
    out = screen.error_structure(screen.Rows(x, y), jump_pp=5.0)
    assert out["cpu 5min"]["error_share_of_big_jumps"] == pytest.approx(20 / 29)
    assert out["memory 30min"]["share_of_points_with_big_jumps"] == pytest.approx(0.1)


def test_io_features_align_on_the_load_buckets_and_read_no_future() -> None:
    rng = np.random.default_rng(9)
    n = 2 * DAY
    io = rng.uniform(0, 8, size=(n - 5, 2))  # the I/O series starts 5 buckets after the load's
    rows = np.arange(n)
    before = screen.io_features(105, io, 100, n, rows)
    assert before.shape == (n, len(screen.IO_NAMES))
    names = list(screen.IO_NAMES)
    assert np.isnan(before[4, names.index("disk_last")])
    assert before[5, names.index("disk_last")] == io[0, 0]
    assert before[9, names.index("net_lag3")] == io[1, 1]
    assert before[20, names.index("disk_mean_1h")] == pytest.approx(io[4:16, 0].mean())
    k = DAY
    changed = io.copy()
    changed[k - 4:] = rng.uniform(0, 8, size=changed[k - 4:].shape)  # every bucket after k (load index k + 1 on)
    after = screen.io_features(105, changed, 100, n, rows)
    np.testing.assert_array_equal(before[: k + 1], after[: k + 1])


def test_io_candidates_read_the_io_columns(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data", vms=6, start="2013-08-13T00:00:00+00:00", days=19.0, seed=6)
    out = tmp_path / "screen.json"
    assert screen.main(["--data", str(data), "--out", str(out), "--candidates", "base,io", "--cases", "cpu5min",
                        "--rows-per-vm", "60", "--rounds", "5"]) == 0
    doc = orjson.loads(out.read_bytes())
    assert 0 < doc["results"]["io"]["cpu 5min"]["wape"] < 1
    io_cols = set(screen._columns("io").tolist()) - set(screen._columns("base").tolist())
    assert len(io_cols) == len(screen.IO_NAMES) and min(io_cols) == N_LOAD_FEATURES + len(screen.EXTRA_NAMES)
    t, disk, net = bitbrains.load_io(sorted(bitbrains.vm_files(data)["1"]))
    assert len(t) > 1000 and np.all(np.diff(t) > 0)
    np.testing.assert_allclose(disk, np.log1p(0.0 + 1.0))  # the generator's constant read / write KB/s
    np.testing.assert_allclose(net, np.log1p(0.5 + 0.5))


def test_io_columns_missing_or_bad_name_the_file(tmp_path: Path) -> None:
    from training.errors import IngestError

    bad = tmp_path / "7.csv"
    bad.write_text("Timestamp [ms];\tCPU usage [%];\tMemory capacity provisioned [KB];\tMemory usage [KB]\n"
                   "1372629804;\t1.5;\t8.0;\t1.0\n")
    with pytest.raises(IngestError, match=r"7\.csv: I/O columns unreadable \(header lacks 'Disk read"):
        bitbrains.load_io([bad])
    neg = tmp_path / "8.csv"
    neg.write_text("Timestamp [ms];\tDisk read throughput [KB/s];\tDisk write throughput [KB/s];\t"
                   "Network received throughput [KB/s];\tNetwork transmitted throughput [KB/s]\n"
                   "1372629804;\t-1;\t0;\t0;\t0\n")
    with pytest.raises(IngestError, match=r"8\.csv: I/O columns must be finite numbers >= 0"):
        bitbrains.load_io([neg])
