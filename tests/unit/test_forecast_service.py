"""The forecast stage: serving inputs equal the trainer's, nothing from the future, unknowns, state, model checks."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from contracts import FeatureVector
from contracts.models import LoadForecast
from featurelib.load_features import HOUR, STEP_S, LoadHistory
from featurelib.load_serving import CPU_COLUMN, MEM_COLUMN, load_sample
from featurelib.node.schema import N_FEATURES, node_feature_schema_hash
from services.forecast.model import ForecastModel, load_forecast_model
from services.forecast.processor import Closed, ForecastProcessor, unknown_reason
from services.forecast.settings import ForecastSettings
from services.runtime.model_watch import ModelRefusedError, resolve
from tests.unit.standins import Ev, Msg
from training.forecast.bitbrains import Series
from training.forecast.dataset import series_points
from training.forecast.synthetic import vm_rows

MODEL_ROOT = Path(__file__).resolve().parents[2] / "models" / "forecast"
T0_S = 1_700_000_100  # 2023-11-14T22:15:00Z, not on a bucket boundary
_SCHEMA = node_feature_schema_hash()


@dataclass
class Sink:
    sent: list[tuple[str, str, Any]] = field(default_factory=list)
    letters: list[tuple[int, str, str]] = field(default_factory=list)
    changelog: list[tuple[int, bytes, bytes]] = field(default_factory=list)

    async def send(self, base_topic: str, key: str, value: Any, ctx: Any) -> None:
        self.sent.append((base_topic, key, value))

    async def changelog_many(self, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
        self.changelog.extend(records)

    async def dead_letter(self, event: Ev, error: str, kind: str) -> None:
        self.letters.append((event.message.offset, error, kind))


@dataclass
class Watcher:
    current: ForecastModel


@pytest.fixture(scope="module")
def model() -> ForecastModel:
    return load_forecast_model(resolve(MODEL_ROOT))


def processor(model: ForecastModel, **env: Any) -> tuple[ForecastProcessor, Sink]:
    sink = Sink()
    return ForecastProcessor(ForecastSettings(**env), sink, Watcher(model)), sink  # type: ignore[arg-type]


def vector(node: str, end_ms: int, cpu: float | None, mem: float | None, offset: int = 0, schema: str = _SCHEMA) -> Ev:
    values = [0.5] * N_FEATURES
    valid = [True] * N_FEATURES
    for col, v in ((CPU_COLUMN, cpu), (MEM_COLUMN, mem)):
        values[col] = 0.0 if v is None else v
        valid[col] = v is not None
    fv = FeatureVector(node=node, ts_ms=end_ms, window_s=10, schema_hash=schema, values=values, valid=valid,
                       samples=10, input_ts_ms=end_ms - 3)
    return Ev(Msg("p-features.v1", 0, offset, node.encode(), orjson.dumps(fv.model_dump(mode="json")), [],
                  end_ms / 1000))


def run(proc: ForecastProcessor, events: list[Ev]) -> list[Closed]:
    async def go() -> list[Closed]:
        out = []
        for ev in events:
            c = await proc.observe(ev)
            if c is not None:
                out.append(c)
        return out
    return asyncio.run(go())


def trace_events(rows: list[tuple[int, float, float]], node: str = "vm") -> list[Ev]:
    # a 10 s window centred on the trace's sample time: the stage puts it in that sample's bucket
    return [vector(node, t * 1000 + 5000, cpu / 100.0, mem / 100.0, offset=i) for i, (t, cpu, mem) in enumerate(rows)]


def same(a: np.ndarray, b: np.ndarray, tol: float) -> bool:
    return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.all(np.abs(np.nan_to_num(a - b)) <= tol))


def test_serving_inputs_equal_the_trainers(model: ForecastModel) -> None:
    rows = vm_rows(seed=4, start_s=T0_S, days=1.4)  # > 24 h: the seasonal features are filled too
    t, cpu, mem = (np.array(c) for c in zip(*rows, strict=True))
    x_train, _, now_s = series_points(Series("vm", t.astype(np.int64), cpu, mem, ()))
    proc, _ = processor(model)
    served = {c.bucket: np.array(c.features) for c in run(proc, trace_events(rows))}
    train_buckets = now_s // STEP_S - 1
    # every bucket the trainer has a row for, except the last (no later sample has closed it online)
    assert set(train_buckets[:-1]) <= set(served) and len(train_buckets) > 300
    seasonal = 0
    for k, x in zip(train_buckets[:-1], x_train[:-1], strict=True):
        # the stage reads utilisation as a fraction (cpu / 100 * 100 may differ in the last bit)
        assert same(served[int(k)], x, 1e-9), f"bucket {k}"
        seasonal += not math.isnan(x[13])
    assert seasonal > 50  # cpu_day_h0 was compared on real values, not only NaN


def test_ten_second_windows_average_into_the_trainers_bucket() -> None:
    bucket_start_ms = (T0_S // STEP_S + 1) * STEP_S * 1000
    ends = [bucket_start_ms + 10_000 * (i + 1) for i in range(30)]  # the last ends exactly on the next boundary
    history = LoadHistory()
    for i, end in enumerate(ends):
        values = [0.0] * N_FEATURES
        values[CPU_COLUMN], values[MEM_COLUMN] = 0.01 * i, 0.5
        assert history.observe(*load_sample(end, 10, values, [True] * N_FEATURES)) is None
    closed = history.observe(*load_sample(ends[-1] + 10_000, 10, values, [True] * N_FEATURES))
    assert closed == bucket_start_ms // 1000 // STEP_S
    features = history.features()
    assert features is not None
    assert features[0] == pytest.approx(sum(i for i in range(30)) / 30) and features[17] == pytest.approx(50.0)


def test_no_future_data_reaches_a_forecast(model: ForecastModel) -> None:
    rows = vm_rows(seed=7, start_s=T0_S, days=0.5)
    cut = 100
    changed = [*rows[:cut], *[(t, 100.0 - c, 100.0 - m) for t, c, m in rows[cut:]]]
    outs = []
    for series in (rows, changed):
        proc, sink = processor(model)
        closed = run(proc, trace_events(series))
        asyncio.run(proc.publish(closed))
        outs.append(({c.bucket: c.features for c in closed}, [v for _, _, v in sink.sent]))
    k_cut = rows[cut][0] // STEP_S  # the first changed sample's bucket: everything before it is fixed
    before = [k for k in outs[0][0] if k < k_cut]
    assert len(before) > 50
    for k in before:
        assert same(np.array(outs[0][0][k]), np.array(outs[1][0][k]), 0.0)
    records = [[r for r in out[1] if r.window_end_ms <= k_cut * STEP_S * 1000] for out in outs]
    assert records[0] == records[1] and any(r.status == "ok" for r in records[0])
    # and the change did reach the later forecasts (the comparison can fail)
    assert [r.quantiles for r in outs[0][1]] != [r.quantiles for r in outs[1][1]]


def test_records_ok_and_unknown(model: ForecastModel) -> None:
    proc, sink = processor(model)
    start = (T0_S // STEP_S) * STEP_S * 1000
    events = [vector("n1", start + 150_000 + i * STEP_S * 1000, 0.2, 0.4, offset=i) for i in range(HOUR + 3)]
    events.append(vector("n1", start + 150_000 + (HOUR + 3) * STEP_S * 1000, None, 0.4, offset=99))
    events.append(vector("n1", start + 150_000 + (HOUR + 4) * STEP_S * 1000, 0.2, 0.4, offset=100))
    asyncio.run(proc._handle({"tp": [ev.message for ev in events]}))  # type: ignore[dict-item]
    records: list[LoadForecast] = [v for _, _, v in sink.sent]
    assert all(topic == "forecasts.v1" and key == "n1" for topic, key, _ in sink.sent)
    assert [r.reason for r in records[: HOUR - 1]] == ["insufficient_history"] * (HOUR - 1)
    assert all(r.status == "unknown" and not r.quantiles for r in records[: HOUR - 1])
    ok = [r for r in records if r.status == "ok"]
    assert len(ok) == 4 and records[-1].reason == "inputs_missing"
    for r in ok:
        assert {(q.resource, q.horizon_s) for q in r.quantiles} == {(res, h) for res in ("cpu", "memory")
                                                                     for h in (300, 900, 1800)}
        assert all(0.0 <= q.p50 <= q.p90 <= 1.0 for q in r.quantiles)
        # a flat 20 % / 40 % node: the median forecast stays near it
        assert abs(r.quantiles[0].p50 - 0.2) < 0.05 and r.model_version == model.version
        assert r.window_end_ms % (STEP_S * 1000) == 0 and r.window_end_ms <= r.ts_ms
    # at most one history snapshot per closed bucket (the runtime may drop a key's superseded ones in a
    # batch); the node's last one restores the history the stage holds now
    assert 1 <= len(sink.changelog) <= len(records)
    _, key, snapshot = sink.changelog[-1]
    assert key == b"n1"
    assert LoadHistory.from_snapshot(snapshot).last_closed == proc.state.histories["n1"].last_closed


def test_unknown_reason_rules() -> None:
    x = [1.0] * 36
    assert unknown_reason(x, 11, 12) == "insufficient_history"
    assert unknown_reason(x, 12, 12) is None
    assert unknown_reason([*x[:17], math.nan, *x[18:]], 12, 12) == "inputs_missing"


def test_bad_vectors_are_dead_lettered(model: ForecastModel) -> None:
    proc, sink = processor(model)
    good = vector("n1", T0_S * 1000, 0.1, 0.1, offset=0)
    bad_json = Ev(Msg("p-features.v1", 0, 1, b"n1", b"{nope", [], T0_S))
    other_schema = vector("n1", T0_S * 1000, 0.1, 0.1, offset=2, schema="0" * 64)
    assert run(proc, [good, bad_json, other_schema]) == []
    assert [(o, kind) for o, _, kind in sink.letters] == [(1, "malformed"), (2, "schema")]
    assert proc.vectors == 1


def test_history_snapshot_round_trip_and_restart() -> None:
    rows = vm_rows(seed=2, start_s=T0_S, days=0.3)
    h = LoadHistory()
    i = 0
    while i < 60 or h.observe(*rows[i]) is None:  # snapshot when a bucket closes, as the stage does
        if i < 60:
            h.observe(*rows[i])
        i += 1
    copy = LoadHistory.from_snapshot(h.snapshot())
    assert same(np.array(copy.features()), np.array(h.features()), 0.0)
    assert copy.valid_buckets() == h.valid_buckets() > 50 and copy.last_closed == h.last_closed
    with pytest.raises(ValueError, match="snapshot"):
        LoadHistory.from_snapshot(h.snapshot()[:-3])
    # the open bucket is not in the snapshot: the restarted stage re-reads its sample, then both agree
    assert copy.observe(*rows[i]) is None
    for row in rows[i + 1 : i + 20]:
        assert h.observe(*row) == copy.observe(*row)
        assert same(np.array(copy.features()), np.array(h.features()), 0.0)


def test_a_replay_from_long_ago_starts_the_node_afresh(model: ForecastModel) -> None:
    proc, _ = processor(model)
    run(proc, trace_events(vm_rows(seed=1, start_s=T0_S, days=0.2)))
    assert proc.state.histories["vm"].valid_buckets() > 40
    run(proc, trace_events(vm_rows(seed=1, start_s=T0_S - 10 * 86_400, days=0.05)))
    assert 0 < proc.state.histories["vm"].valid_buckets() < 20


def _copy(tmp_path: Path) -> Path:
    src = resolve(MODEL_ROOT)
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_model_refused_on_another_schema_or_a_changed_file(tmp_path: Path) -> None:
    version = _copy(tmp_path)
    card_path = version / "model_card.json"
    card = json.loads(card_path.read_text())
    card["features"]["schema_hash"] = "f" * 64
    card_path.write_text(json.dumps(card))
    with pytest.raises(ModelRefusedError, match="feature schema"):
        load_forecast_model(version)
    shutil.rmtree(version)
    version = _copy(tmp_path)
    with (version / "cpu_5min_p50.onnx").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ModelRefusedError, match="sha256"):
        load_forecast_model(version)
