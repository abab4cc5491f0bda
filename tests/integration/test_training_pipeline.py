"""End to end on a generated trace: train -> versioned model dir -> eval report + PNG (no shared data)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from featurelib.task_features import TASK_FEATURE_NAMES, task_feature_schema_hash
from training.cli import eval_failure, train_failure
from training.model_card import resolve_model_dir, sha256_file
from training.synthetic_trace import SyntheticConfig, generate, write_google2011, write_google2019


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pipeline")
    trace = generate(SyntheticConfig(seed=11, duration_s=10 * 3600, n_jobs=500))
    write_google2011(trace, root / "g2011", n_parts=4)
    write_google2019(trace, root / "g2019", "parquet")
    argv = ["--task-events", str(root / "g2011" / "task_events"), "--job-events", str(root / "g2011" / "job_events"),
            "--out", str(root / "models"), "--seed", "1", "--quiet"]
    assert train_failure(argv) == 0
    return root, root / "models"


def test_training_writes_a_versioned_model_and_points_current_at_it(trained: tuple[Path, Path]) -> None:
    _, models = trained
    version_dir = resolve_model_dir(models)
    assert (models / "CURRENT").read_text().strip() == version_dir.name
    names = {p.name for p in version_dir.iterdir()}
    assert {"horizon_300s.onnx", "horizon_900s.onnx", "horizon_3600s.onnx", "model_card.json",
            "baselines.json", "validation_report.json", "validation_pr_curves.png"} <= names
    card = orjson.loads((version_dir / "model_card.json").read_bytes())
    assert card["version"] == version_dir.name
    assert card["features"]["names"] == list(TASK_FEATURE_NAMES)
    assert card["features"]["schema_hash"] == task_feature_schema_hash()
    assert len(card["data"]["fingerprint"]) == 64 and card["data"]["job_events"]["rows"] > 0
    assert card["training_command"].startswith("borgctl train failure --task-events")
    assert card["label"]["horizons_s"] == [300, 900, 3600]
    assert card["split"]["test_start_us"] - card["split"]["train_end_us"] == 3600 * 1_000_000
    assert len(card["onnx"]["sha256"]) == 6  # 3 ONNX files + 3 native boosters
    for name, digest in card["onnx"]["sha256"].items():
        assert sha256_file(version_dir / name) == digest
    assert all(diff <= 1e-5 for diff in card["onnx"]["parity_max_abs_diff"].values())
    assert card["split"]["cold_start_views"]["points"] > 0  # extra rows with late-starting history
    assert set(card["metrics"]["cold_start"]["horizons"]) == {"300s", "900s", "3600s"}
    for horizon in ("300s", "900s", "3600s"):
        m = card["metrics"]["horizons"][horizon]
        assert {"aucpr", "roc_auc", "precision_at_k", "recall_at_fpr_0.05"} <= set(m["model"])
        assert set(m["baselines"]) == {"positive_rate", "priority_class_lr", "failed_before"}
        table = card["calibration"]["horizons"][horizon]  # fitted on the training tail, applied by serving
        assert len(table["x"]) == len(table["y"]) >= 2 and table["y"] == sorted(table["y"])
        assert table["y"][0] >= 0.0 and table["y"][-1] <= 1.0
        assert card["calibration"]["reliability_test_window"][horizon]["table"]
    ranges = card["input_ranges"]
    unused = set(card["features"]["unused_by_the_trees"])
    assert ranges and not unused & set(ranges) and set(ranges) <= set(TASK_FEATURE_NAMES)
    assert all(lo <= hi for lo, hi in ranges.values())
    assert ranges["priority"][0] >= 0 and ranges["priority"][1] <= 11


def test_eval_on_the_training_files_scores_only_the_held_out_window(trained: tuple[Path, Path]) -> None:
    root, models = trained
    out = root / "reports" / "same.json"
    assert eval_failure(["--task-events", str(root / "g2011" / "task_events"), "--model", str(models),
                         "--out", str(out), "--quiet"]) == 0
    report = orjson.loads(out.read_bytes())
    card = orjson.loads((resolve_model_dir(models) / "model_card.json").read_bytes())
    assert report["window"]["mode"] == "heldout"
    assert report["window"]["start_us"] == card["split"]["test_start_us"]
    assert (root / "reports" / "same.pr_curves.png").stat().st_size > 1000
    for horizon, m in report["horizons"].items():  # the same numbers as the card's validation metrics
        assert m["model"]["aucpr"] == pytest.approx(card["metrics"]["horizons"][horizon]["model"]["aucpr"])
        assert m["positive_rate"] > 0 and m["calibration"]["table"]
        assert m["model"]["aucpr"] > m["baselines"]["positive_rate"]["aucpr"]


def test_eval_accepts_the_2019_format_and_scores_every_point(trained: tuple[Path, Path]) -> None:
    root, models = trained
    out = root / "reports" / "g2019.json"
    assert eval_failure(["--task-events", str(root / "g2019" / "instance_events"), "--model", str(models),
                         "--out", str(out), "--quiet"]) == 0
    report = orjson.loads(out.read_bytes())
    assert report["window"]["mode"] == "all"
    assert report["data"]["task_events"]["format"] == "parquet"
    assert set(report["horizons"]) == {"300s", "900s", "3600s"}
