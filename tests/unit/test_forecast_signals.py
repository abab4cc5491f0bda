"""training.forecast.signals: each signal finds the structure it is meant to find in generated series (and only
there), and the CLI reads the training VMs only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from featurelib.load_features import DAY
from tests.forecast_helpers import record_vm_reads
from training.forecast import bitbrains, signals
from training.forecast.synthetic import write_dataset
from training.forecast.train import split_vms

HOUR = signals.HOUR


def _noise(rng: np.random.Generator, vms: int, n: int) -> np.ndarray:
    return 30.0 + rng.normal(0.0, 0.5, size=(vms, n))


def test_hourly_jumps_show_in_the_hour_ago_signal_and_the_bucket_of_the_hour() -> None:
    rng = np.random.default_rng(1)
    x = _noise(rng, 4, 3 * DAY)
    x[:, np.arange(3 * DAY) % HOUR == 5] += 20.0  # a 5-minute job at the same minute of every hour
    row = signals.signal_table(x, first_bucket=0, steps=1, jump_pp=5.0)
    assert row["hour_ago"]["corr"] > 0.95 and row["day_ago"]["corr"] > 0.95  # hourly is also daily
    assert abs(row["fleet_past"]["corr"]) < 0.8
    counts = row["jumps_by_bucket_of_hour"]
    assert counts[5] > 0 and counts[6] > 0 and sum(counts) == counts[5] + counts[6]  # up at :25, down at :30
    assert row["jumps_max_over_mean_bucket"] == pytest.approx(12 / 2, rel=0.1)


def test_a_wave_that_reaches_half_the_fleet_a_bucket_later_shows_in_the_fleet_signal() -> None:
    rng = np.random.default_rng(2)
    n = 2 * DAY
    wave = np.cumsum(rng.normal(0.0, 3.0, size=n + 1))  # a random walk the whole fleet follows
    x = _noise(rng, 8, n)
    x[:4] += wave[1:]  # leaders
    x[4:] += wave[:-1]  # followers: one bucket late
    row = signals.signal_table(x, first_bucket=0, steps=1, jump_pp=5.0)
    assert row["fleet_past"]["corr"] > 0.3  # the leaders' last move is the followers' next one
    assert abs(row["hour_ago"]["corr"]) < 0.1 and abs(row["day_ago"]["corr"]) < 0.1
    alone = signals.signal_table(x[:4], first_bucket=0, steps=1, jump_pp=5.0)
    assert abs(alone["fleet_past"]["corr"]) < 0.1  # the leaders' past says nothing about their future


def test_no_signal_in_independent_noise_and_targets_stop_at_the_last_bucket() -> None:
    rng = np.random.default_rng(3)
    x = _noise(rng, 6, 2 * DAY)
    row = signals.signal_table(x, first_bucket=7, steps=3, jump_pp=1.5)
    for name in ("day_ago", "hour_ago", "fleet_past"):
        assert abs(row[name]["corr"]) < 0.05
    assert row["own_past"]["corr"] < -0.3  # noise around a level reverts: the last move is undone
    cut = signals.signal_table(x, first_bucket=7, steps=3, jump_pp=1.5, last_target=DAY)
    assert cut["points"] == 6 * (DAY + 1 - 3)
    with pytest.raises(ValueError, match="no series"):
        signals.align({})


def test_align_places_each_series_at_its_first_bucket() -> None:
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([[5.0, 6.0]])
    first, x = signals.align({"a": (10, a), "b": (12, b)})
    assert first == 10 and x.shape == (2, 3, 2)
    assert np.array_equal(x[0, :2], a) and np.isnan(x[0, 2]).all()
    assert np.isnan(x[1, :2]).all() and np.array_equal(x[1, 2], b[0])


def test_cli_reads_the_training_vms_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = write_dataset(tmp_path / "data", vms=6, start="2013-08-20T00:00:00+00:00", days=6.0, seed=4)
    read = record_vm_reads(monkeypatch)
    out = tmp_path / "signals.json"
    assert signals.main(["--data", str(data), "--out", str(out)]) == 0
    train, held = split_vms(sorted(bitbrains.vm_files(data)), 0.2, 0)
    assert sorted(read) == train and not set(read) & set(held)
    doc = orjson.loads(out.read_bytes())
    assert doc["vms"] == len(train) and set(doc["cases"]) == {
        f"{r} {m}min" for r in ("cpu", "mem") for m in (5, 15, 30)}
    assert all(doc["cases"][c]["points"] > 0 for c in doc["cases"])
    assert signals.main(["--data", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "signals:" in capsys.readouterr().err
