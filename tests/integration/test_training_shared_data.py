"""Acceptance on the real Google 2011 parts: the shipped model beats every baseline on AUCPR at every horizon."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from training import settings
from training.cli import eval_failure

TASK_EVENTS = settings.google2011_dir() / "task_events"
JOB_EVENTS = settings.google2011_dir() / "job_events"

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.skipif(not TASK_EVENTS.is_dir(), reason=f"shared trace data not found at {TASK_EVENTS} "
                       "(set BORG_DATA_DIR to the folder holding google2011/)"),
]


def test_shipped_model_beats_every_baseline_on_the_held_out_window(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    argv = ["--task-events", str(TASK_EVENTS), "--out", str(out), "--quiet"]
    if JOB_EVENTS.is_dir():
        argv += ["--job-events", str(JOB_EVENTS)]
    assert eval_failure(argv) == 0
    report = orjson.loads(out.read_bytes())
    assert report["window"]["mode"] == "heldout"  # the shipped model was trained on the earlier part
    assert (tmp_path / "report.pr_curves.png").is_file()
    assert set(report["horizons"]) == {"300s", "900s", "3600s"}
    for horizon, m in report["horizons"].items():
        model = m["model"]["aucpr"]
        for name, baseline in m["baselines"].items():
            assert model > baseline["aucpr"], f"{horizon}: model AUCPR {model:.4f} <= {name} {baseline['aucpr']:.4f}"
        assert m["positive_rate"] > 0 and m["model"]["roc_auc"] > 0.5
    assert report["model_beats_every_baseline_aucpr_at_every_horizon"] is True
