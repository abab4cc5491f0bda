"""`borgctl train forecast --quick` + `borgctl eval forecast` on a small generated dataset (same layout)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from featurelib.load_features import LOAD_FEATURE_NAMES
from training.forecast.cli import eval_forecast, train_forecast
from training.forecast.model import onnx_forecast
from training.forecast.synthetic import write_dataset

TRAIN_END = "2013-09-01T00:00:00Z"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("forecast")
    data = write_dataset(root / "data", vms=10, start="2013-08-22T00:00:00+00:00", days=14.0, seed=3)
    out = root / "models"
    code = train_forecast(["--data", str(data), "--out", str(out), "--quick", "--seed", "1", "--quiet",
                           "--train-end", TRAIN_END, "--version", "v-test"])
    assert code == 0
    return data, out


def test_model_directory_and_card(trained: tuple[Path, Path]) -> None:
    _, out = trained
    assert (out / "CURRENT").read_text().strip() == "v-test"
    version = out / "v-test"
    card = orjson.loads((version / "model_card.json").read_bytes())
    assert card["kind"] == "load-forecast"
    assert card["features"]["names"] == list(LOAD_FEATURE_NAMES)
    assert "CCGrid 2015" in card["data"]["citation"]
    split = card["split"]
    assert not set(split["train_vms"]) & set(split["heldout_vms"])
    assert len(split["heldout_vms"]) == 2
    assert len(card["serving"]["files"]) == 12
    for name, m in card["models"].items():
        assert (version / name).is_file()
        assert m["onnx_parity_max_abs_diff"] <= 1e-3
    assert not list(out.glob(".*.partial"))
    # the ONNX output is the forecast in percent: near the level for a flat input
    x = np.full((1, len(LOAD_FEATURE_NAMES)), np.nan, dtype=np.float32)
    x[0, LOAD_FEATURE_NAMES.index("cpu_last")] = 30.0
    p = onnx_forecast(version / "cpu_5min_p50.onnx", x)
    assert 0.0 < p[0] < 100.0


def test_eval_reproduces_the_card_on_unseen_vms(trained: tuple[Path, Path], tmp_path: Path) -> None:
    data, out = trained
    report = tmp_path / "eval.json"
    assert eval_forecast(["--data", str(data), "--model", str(out), "--out", str(report), "--quiet"]) == 0
    doc = orjson.loads(report.read_bytes())
    card = orjson.loads((out / "v-test" / "model_card.json").read_bytes())
    assert doc["details"]["vms_left_out_as_training"] == 8
    assert doc["details"]["vms_scored"] == 2
    rows = {(r["case"], r["metric"]): r["value"] for r in doc["results"]}
    assert all(r["bench"] == "forecast" for r in doc["results"])
    for case in ("cpu 5min", "cpu 15min", "cpu 30min", "memory 5min", "memory 15min", "memory 30min"):
        for metric in ("wape", "one_minus_wape", "p90_coverage", "wape_persistence", "wape_moving_average_1h",
                       "wape_seasonal_naive"):
            assert (case, metric) in rows
        assert rows[(case, "wape")] == pytest.approx(card["metrics"]["cases"][case]["wape"], rel=1e-12)
        assert 0.0 <= rows[(case, "p90_coverage")] <= 1.0


def test_training_vms_recognised_by_content_not_name(trained: tuple[Path, Path], tmp_path: Path) -> None:
    data, out = trained
    renamed = tmp_path / "renamed"
    for i, f in enumerate(sorted(data.rglob("*.csv.gz"))):
        target = renamed / f.parent.name / f"x{i}-{f.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, target)
    report = tmp_path / "eval.json"
    assert eval_forecast(["--data", str(renamed), "--model", str(out), "--out", str(report), "--quiet",
                          "--from", "2013-09-02T00:00:00Z"]) == 0
    details = orjson.loads(report.read_bytes())["details"]
    # every file is its own "VM" now; the training VMs' files are still recognised
    assert details["vms_left_out_as_training"] > 0
    assert details["after"].startswith("2013-09-02")


def test_bad_row_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_dataset(tmp_path / "data", vms=3, start="2013-08-30T00:00:00+00:00", days=3.0)
    victim = sorted(data.rglob("*.csv.gz"))[0]
    lines = gzip.decompress(victim.read_bytes()).decode().splitlines()
    lines[4] = "12x" + lines[4][lines[4].index(";"):]  # a timestamp that is not a number
    victim.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    code = train_forecast(["--data", str(data), "--out", str(tmp_path / "m"), "--quick", "--quiet"])
    assert code == 2
    assert f"{victim}:5:" in capsys.readouterr().err


def test_borgctl_wiring_and_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from borgctl.main import main as borgctl

    assert borgctl(["eval", "forecast", "--data", str(tmp_path / "nope"), "--model", str(tmp_path), "--out",
                    str(tmp_path / "r.json")]) == 2
    assert "borgctl eval forecast: error:" in capsys.readouterr().err
    assert borgctl(["train", "forecast", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "m")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
