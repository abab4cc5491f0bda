"""Retraining from topics (pure parts): window labels, the task-event part file, the trainer's lock and status."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import orjson
import pytest

from contracts.models import TaskEvent
from featurelib.borg_units import LargestNode
from training.from_topics import RUNS_FILE, record_run
from training.from_topics_failure import PART, write_part
from training.from_topics_regime import REGIME_INDEX, label_windows
from training.synthetic_trace import TRACE_START_US
from training.trainer import LOCK_FILE, STATUS_FILE, exclusive, main, write_status

T0 = 1_764_000_000_000


def test_a_window_is_labelled_by_the_majority_of_its_last_pane() -> None:
    ticks = np.arange(T0, T0 + 30_000, 1000, dtype=np.int64)
    regimes = np.array([REGIME_INDEX["llc"]] * 10 + [REGIME_INDEX["membw"]] * 7 + [REGIME_INDEX["core"]] * 13)
    slow = np.ones((30, 4))
    slow[10:20] = 2.0
    truth = {"n1": (ticks, regimes, slow)}
    has, regime, mean = label_windows(["n1", "n1", "n2", "n1"], np.array([T0 + 10_000, T0 + 20_000, T0 + 20_000,
                                                                         T0 + 90_000]), truth)
    assert has.tolist() == [True, True, False, False]  # n2 has no ground truth; the last window none in its pane
    assert regime[0] == REGIME_INDEX["llc"]  # ticks 0..9 s
    assert regime[1] == REGIME_INDEX["membw"]  # ticks 10..19 s: 7 membw, 3 core
    assert mean[1].tolist() == [2.0] * 4


def _event(i: int, ts_ms: int, kind: str, **kw: object) -> TaskEvent:
    return TaskEvent(task_id=f"t{i}", job_id=str(kw.pop("job", "7")), task_index=i, ts_ms=ts_ms, event=kind,  # type: ignore[arg-type]
                     source=kw.pop("source", "google2011"), **kw)  # type: ignore[arg-type]


def _rows(path: Path) -> list[list[str]]:
    with (path / PART).open() as f:
        return list(csv.reader(f))


def test_replayed_trace_events_keep_their_trace_time(tmp_path: Path) -> None:
    events = [_event(0, T0, "SUBMIT", trace_time_us=0, machine="m12", cpu_request=0.1),
              _event(0, T0 + 5, "SCHEDULE", trace_time_us=5_000, machine="m12", cpu_request=0.1)]
    info = write_part(events, tmp_path, LargestNode())
    rows = _rows(tmp_path)
    assert info["time"] == "trace_time_us" and [r[0] for r in rows] == ["0", "5000"]
    assert rows[0][2:6] == ["7", "0", "12", "0"] and rows[1][5] == "1" and rows[0][9] == "0.1"


def test_cluster_events_get_event_time_and_the_borg_scale(tmp_path: Path) -> None:
    events = [_event(0, T0, "SUBMIT", source="kubernetes", job="web", machine="node-a", cpu_request=2.0,
                     memory_request=4.0, priority=1000),
              _event(1, T0 + 1500, "FAIL", source="kubernetes", job="web", machine="node-b", cpu_request=2.0)]
    info = write_part(events, tmp_path / "a", LargestNode(cpu_cores=8.0, memory_gib=16.0))
    rows = _rows(tmp_path / "a")
    assert info["time"].startswith("ts_ms")
    assert [int(r[0]) for r in rows] == [TRACE_START_US, TRACE_START_US + 1_500_000]
    assert rows[0][2] == rows[1][2] and int(rows[0][2]) >= 10**12  # a named job becomes one stable integer
    assert rows[0][4] != rows[1][4]  # two machines
    assert float(rows[0][9]) == 0.25 and float(rows[0][10]) == 0.25  # cores / largest, GiB / largest
    # without the largest node the requests cannot be placed: missing, as the risk stage scores them
    write_part(events, tmp_path / "b", LargestNode())
    assert _rows(tmp_path / "b")[0][9] == "" and _rows(tmp_path / "b")[0][10] == ""


def test_only_one_training_run_holds_the_lock(tmp_path: Path) -> None:
    with exclusive(tmp_path) as first:
        assert first
        with exclusive(tmp_path) as second:
            assert not second
    with exclusive(tmp_path) as again:
        assert again
    assert (tmp_path / LOCK_FILE).exists()


def test_once_is_skipped_while_another_run_trains(tmp_path: Path) -> None:
    root = tmp_path / "regime"
    with exclusive(root) as held:
        assert held
        assert main(["--model", "regime", "--models", str(tmp_path), "--once", "--", "--quick"]) == 0
    assert not (root / STATUS_FILE).exists()  # nothing ran


def test_status_and_runs_are_written_for_operators(tmp_path: Path) -> None:
    write_status(tmp_path, state="running", model="failure", trigger="drift", started=1.0)
    assert orjson.loads((tmp_path / STATUS_FILE).read_bytes())["state"] == "running"
    record_run(tmp_path, {"model": "failure", "ok": False, "error": "no data"})
    record_run(tmp_path, {"model": "failure", "ok": True, "version": "v2"})
    lines = (tmp_path / RUNS_FILE).read_bytes().splitlines()
    assert [orjson.loads(line)["ok"] for line in lines] == [False, True]


def test_a_recording_too_short_or_without_failures_is_refused() -> None:
    from training.from_topics import FromTopicsError
    from training.from_topics_failure import check_enough

    hour = 3_600_000
    fails = [_event(i, T0 + i * 60_000, "FAIL") for i in range(30)]
    long_enough = [*fails, *(_event(100 + i, T0 + i * hour, "FINISH") for i in range(100))]
    check_enough(long_enough, "taskevents.v1")
    with pytest.raises(FromTopicsError, match=r"30 FAIL, over 0\.5 h"):
        check_enough([*fails, *(_event(100 + i, T0 + i * 10_000, "FINISH") for i in range(100))], "taskevents.v1")
    with pytest.raises(FromTopicsError, match="3 FAIL"):
        check_enough([*fails[:3], *long_enough[30:]], "taskevents.v1")


async def test_the_trainer_starts_on_a_drift_report_for_its_model_only() -> None:
    from contracts import encode
    from contracts.models import DriftReport
    from training.trainer import _drift_said_so

    def report(model: str, status: str) -> bytes:
        return encode(DriftReport(model=model, model_version="v", ts_ms=T0, window_s=1.0, samples=0,
                                  prediction_samples=0, status=status, data_threshold=0.1,  # type: ignore[arg-type]
                                  feature_threshold=0.2, prediction_threshold=0.2))

    class Consumer:
        def __init__(self, values: list[bytes]) -> None:
            self.values = values

        async def getmany(self, timeout_ms: int) -> dict[str, list[object]]:
            return {"tp": [type("Msg", (), {"value": v})() for v in self.values]}

    assert await _drift_said_so("failure", Consumer([report("failure", "drift")]))  # type: ignore[arg-type]
    assert not await _drift_said_so("failure", Consumer([report("regime", "drift"), b"{",  # type: ignore[arg-type]
                                                          report("failure", "no_drift")]))


def test_a_fresh_models_volume_is_seeded_once_from_the_image(tmp_path: Path) -> None:
    from training.trainer import seed

    image = tmp_path / "image"
    (image / "failure" / "v1").mkdir(parents=True)
    (image / "failure" / "CURRENT").write_text("v1\n")
    volume = tmp_path / "volume" / "failure"
    seed(volume, image)
    assert (volume / "CURRENT").read_text() == "v1\n" and (volume / "v1").is_dir()
    (volume / "CURRENT").write_text("v2\n")  # the volume's own state wins from then on
    seed(volume, image)
    assert (volume / "CURRENT").read_text() == "v2\n"
