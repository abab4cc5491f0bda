"""Regime and anomaly services without a broker: hysteresis, abstention, model cards, refusal, dead letters,
batching.

The processors are driven with stand-in consumed events and a recording sink; the models are
trained in the test (quick simulator runs), never hard-coded.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from contracts import AnomalyScore, FeatureVector, RegimeLabelV2, decode, encode
from contracts.headers import build_headers, span_context_in, trace_id_of
from contracts.models import REGIMES, WORKLOAD_CLASSES
from contracts.topics import topic_spec
from featurelib.node.schema import FEATURE_INDEX, N_FEATURES, as_model_input, node_feature_schema_hash
from services.anomaly.model import load_anomaly_model
from services.anomaly.processor import AnomalyProcessor
from services.anomaly.settings import AnomalySettings
from services.regime import abstention, hysteresis
from services.regime import processor as regime_processor
from services.regime.model import load_regime_model
from services.regime.processor import REPLAY_HISTORY, WINDOWS, RegimeProcessor
from services.regime.settings import RegimeSettings
from services.runtime.model_watch import ModelRefusedError, ModelWatcher, infer_rows, resolve
from services.runtime.telemetry import setup_tracing
from tests.unit.standins import Ev, Msg
from training.regime.cli import train_regime

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def model_root(tmp_path_factory: pytest.TempPathFactory, quick_anomaly_model: Path) -> Path:
    root = tmp_path_factory.mktemp("models")
    # smaller than --quick (24 nodes x 700 ticks): the simulation is most of the cost, and these tests need a
    # working model with cards, not a good one (held-out accuracy 0.39 vs chance 0.28 at this size, seeded)
    small = ["--nodes", "12", "--ticks", "400", "--test-nodes", "8", "--test-ticks", "400", "--trees", "40",
             "--depth", "4", "--folds", "2"]
    assert train_regime([*small, "--no-alibaba", "-q", "--out", str(root / "regime"), "--version", "r1"]) == 0
    (root / "anomaly").symlink_to(quick_anomaly_model, target_is_directory=True)  # trained once per session
    return root


# ---------------------------------------------------------------------------------- hysteresis


def test_hysteresis_needs_consecutive_windows() -> None:
    step = hysteresis.advance(None, "none", 1, windows=2)
    assert step.regime == "none" and step.changed
    seq = ["llc", "none", "llc", "llc", "llc", "membw", "llc"]
    reported, changes = [], []
    state = step.state
    for i, raw in enumerate(seq):
        step = hysteresis.advance(state, raw, i + 2, windows=2)
        state = step.state
        reported.append(step.regime)
        changes.append(step.changed)
    # one noisy window never flips it; two in a row do
    assert reported == ["none", "none", "none", "llc", "llc", "llc", "llc"]
    assert changes == [False, False, False, True, False, False, False]


def test_hysteresis_one_window_setting_follows_raw() -> None:
    state = hysteresis.advance(None, "none", 1, windows=1).state
    step = hysteresis.advance(state, "core", 2, windows=1)
    assert step.regime == "core" and step.changed


def test_hysteresis_reports_unknown_at_once_and_starts_afresh_after_it() -> None:
    state = hysteresis.advance(None, "llc", 1, windows=3).state
    state = hysteresis.advance(state, "membw", 2, windows=3).state  # a candidate pending
    assert state["candidate"] == "membw"
    step = hysteresis.abstain(state, 3)
    # no hysteresis into unknown: nothing may keep acting on the stale "llc"; the candidate is dropped
    assert (step.regime, step.changed) == ("unknown", True)
    assert step.state == {"reported": "unknown", "candidate": None, "count": 0, "ts": 3}
    again = hysteresis.abstain(step.state, 4)
    assert (again.regime, again.changed) == ("unknown", False)
    # the first answered window after it is reported at once, as a node's first window is
    back = hysteresis.advance(again.state, "core", 5, windows=3)
    assert (back.regime, back.changed) == ("core", True)
    assert back.state == hysteresis.advance(None, "core", 5, windows=3).state
    # ... and from there on hysteresis holds again
    assert hysteresis.advance(back.state, "none", 6, windows=3).regime == "core"
    # a node whose very first window is unknown
    first = hysteresis.abstain(None, 1)
    assert (first.regime, first.changed) == ("unknown", True)


def test_hysteresis_record_round_trip_keeps_labels_byte_for_byte() -> None:
    labels = [b'{"node":"n","ts_ms":%d,"confidence":0.1000000000000000055511151231257827}' % t for t in (1, 2)]
    record = orjson.dumps({"reported": "llc", "candidate": None, "count": 0, "ts": 2,
                           "history": [orjson.loads(lab) for lab in labels]})
    memory = hysteresis.decode(record)
    assert memory.state == {"reported": "llc", "candidate": None, "count": 0, "ts": 2}
    assert [h.ts_ms for h in memory.history] == [1, 2]
    assert [h.encoded for h in memory.history] == [orjson.dumps(orjson.loads(lab)) for lab in labels]
    assert hysteresis.encode(memory.state, memory.history) == record
    assert memory.earlier(2) is memory.history[1] and memory.earlier(3) is None


# ---------------------------------------------------------------------------------- stand-ins


@dataclass
class RecordingSink:
    sent: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    letters: list[tuple[Msg, str, str]] = field(default_factory=list)
    changelog_writes: int = 0
    dead_lettered: int = 0
    records: list[tuple[int, bytes, bytes]] = field(default_factory=list)

    raw: list[bytes] = field(default_factory=list)
    """The bytes of what went through send_encoded (the label in ``sent`` is decoded from them)."""

    async def send(self, base_topic: str, key: str, value: Any, ctx: Any) -> None:
        self.sent.append((base_topic, key, value, build_headers(base_topic, ctx)))

    async def send_encoded(self, base_topic: str, key: str, value: bytes, ctx: Any) -> None:
        self.raw.append(value)
        self.sent.append((base_topic, key, decode(topic_spec(base_topic).model, value), build_headers(base_topic, ctx)))

    async def send_quiet(self, base_topic: str, key: str, value: bytes, stage: Any, *,
                         extra_headers: Any = None) -> None:
        # the real Sink's fused step (no span processor): the stage span's context, as send_encoded gets it
        await self.send_encoded(base_topic, key, value, span_context_in(stage))

    async def changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.changelog_writes += 1

    async def changelog_many(self, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
        self.changelog_writes += len(records)
        self.records.extend(records)

    async def dead_letter(self, event: Ev, error: str, kind: str) -> None:
        self.letters.append((event.message, error, kind))
        self.dead_lettered += 1

    async def flush(self) -> None:
        return None


def vector_event(node: str, ts: int, offset: int, values: list[float] | None = None,
                 schema: str | None = None, headers: list[tuple[str, bytes]] | None = None,
                 partition: int = 0, invalid: frozenset[int] = frozenset()) -> Ev:
    rng = np.random.default_rng(offset)
    vals = values if values is not None else [float(v) for v in rng.uniform(0, 2, N_FEATURES)]
    valid = [i not in invalid for i in range(len(vals))]
    fv = FeatureVector(node=node, ts_ms=ts, window_s=10, schema_hash=schema or node_feature_schema_hash(),
                       values=[0.0 if i in invalid else v for i, v in enumerate(vals)], valid=valid, samples=10,
                       input_ts_ms=ts - 5)
    return Ev(Msg("p-features.v1", partition, offset, node.encode(), orjson.dumps(fv.model_dump(mode="json")),
                  headers or [], ts / 1000))


@pytest.fixture
def traced() -> Iterator[None]:
    setup_tracing("test", None)
    yield


def _regime(model_root: Path, **env: Any) -> tuple[RegimeProcessor, RecordingSink]:
    sink = RecordingSink()
    settings = RegimeSettings(**env)
    watcher = ModelWatcher("regime", model_root / "regime", load_regime_model, poll_s=60)
    return RegimeProcessor(settings, sink, watcher), sink  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- regime


def test_regime_batch_labels_dead_letters_and_keeps_trace(model_root: Path, traced: None) -> None:
    proc, sink = _regime(model_root)
    parent = build_headers("features.v1")  # no active span: no traceparent
    traceparent = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    events = [
        vector_event("n1", T0 + 10_000, 0, headers=traceparent),
        vector_event("n2", T0 + 10_000, 1),
        Ev(Msg("p-features.v1", 0, 2, b"x", b"{broken", parent, T0 / 1000)),
        vector_event("n3", T0 + 10_000, 3, schema="a" * 64),
        vector_event("n4", T0 + 10_000, 4, values=[0.5] * (N_FEATURES - 3)),
    ]
    asyncio.run(proc.handle_batch(events))
    labels = [decode(RegimeLabelV2, orjson.dumps(v.model_dump(mode="json"))) for _, _, v, _ in sink.sent]
    assert [lab.node for lab in labels] == ["n1", "n2"]
    assert {topic for topic, _, _, _ in sink.sent} == {"regimes.v2"}
    for lab in labels:
        assert lab.changed and lab.model_version == "r1"
        if lab.regime == "unknown":  # the model may judge random vectors out of its distribution
            assert lab.abstain and lab.interference == {} and lab.confidence == 0.0
        else:
            assert set(lab.interference) == {"cpu_bound", "llc_sensitive", "memory_bound", "frontend_bound"}
            assert all(1.0 <= s <= 100.0 for s in lab.interference.values())
    assert trace_id_of(sink.sent[0][3]) == "0af7651916cd43dd8448eb211c80319c"  # continued, not a new root
    kinds = sorted((m.offset, k) for m, _, k in sink.letters)
    assert kinds == [(2, "malformed"), (3, "schema"), (4, "schema")]
    assert "needs" in sink.letters[-1][1] or "needs" in sink.letters[-2][1]


def test_regime_replay_of_a_window_is_identical_and_hysteresis_not_advanced(model_root: Path) -> None:
    proc, sink = _regime(model_root, hysteresis_windows=3)
    first = [vector_event("n1", T0 + i * 10_000, i) for i in range(4)]
    asyncio.run(proc.handle_batch(first))
    before = [v for _, _, v, _ in sink.sent]
    asyncio.run(proc.handle_batch(first[1:3]))  # re-delivered after a crash
    again = [v for _, _, v, _ in sink.sent[len(before):]]
    assert again == before[1:3]
    asyncio.run(proc.handle_batch([vector_event("n1", T0 + 40_000, 9)]))
    assert sink.sent[-1][2].ts_ms == T0 + 40_000


def test_regime_replay_after_a_restart_sends_the_identical_bytes(model_root: Path) -> None:
    proc, sink = _regime(model_root)
    first = [vector_event(n, T0 + i * 10_000, 10 * i + j) for i in range(8) for j, n in enumerate(("n1", "n2"))]
    asyncio.run(proc.handle_batch(first))
    sent = {(v.node, v.ts_ms): encode(v) for _, _, v, _ in sink.sent}
    # a new process: the state as restored from the changelog (other bytes objects), nothing decoded yet
    again, sink2 = _regime(model_root)
    again.state.data.update({k: bytes(bytearray(v)) for k, v in proc.state.data.items()})
    replayed = WINDOWS.labels("replayed")._value.get()
    stale = WINDOWS.labels("stale")._value.get()
    asyncio.run(again.handle_batch(first))
    # the newest REPLAY_HISTORY windows per node are answered identically, older ones are stale
    kept = first[-2 * REPLAY_HISTORY:]
    assert [(v.node, v.ts_ms) for _, _, v, _ in sink2.sent] == [
        (e.message.key.decode(), decode(FeatureVector, e.message.value).ts_ms) for e in kept]  # type: ignore[union-attr]
    assert all(encode(v) == sent[(v.node, v.ts_ms)] for _, _, v, _ in sink2.sent)
    assert WINDOWS.labels("replayed")._value.get() - replayed == len(kept)
    assert WINDOWS.labels("stale")._value.get() - stale == len(first) - len(kept)
    assert sink2.changelog_writes == 0  # a replay changes no state


OOD_COLUMN = 1
"""The fake model's out-of-distribution score of a window is this feature (NaN when invalid: not computed)."""


@dataclass
class FakeRegimeModel:
    """The raw regime of a window is REGIMES[int(first feature)]; slowdowns 1.5. It abstains as the real
    one does on missing counters (the default required features) and when feature ``OOD_COLUMN`` > 1."""

    version: str = "f1"
    regimes: tuple[str, ...] = REGIMES
    card: dict[str, Any] = field(default_factory=lambda: {"outputs": {"workload_classes": list(WORKLOAD_CLASSES)}})
    judged: list[int] = field(default_factory=list)
    """Rows per judge call."""

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        probs = np.full((len(x), len(self.regimes)), 0.02)
        probs[np.arange(len(x)), np.nan_to_num(x[:, 0]).astype(int)] = 0.92
        return probs, np.full((len(x), len(WORKLOAD_CLASSES)), 1.5)

    def judge(self, x_full: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.judged.append(len(x_full))
        required = [FEATURE_INDEX[n] for n in abstention.DEFAULT_REQUIRED_FEATURES]
        ood = x_full[:, OOD_COLUMN].astype(np.float64)
        mask = np.where(abstention.counters_missing(x_full, required), abstention.COUNTERS_MISSING, 0)
        mask |= np.where(ood > 1.0, abstention.OUT_OF_DISTRIBUTION, 0)
        return mask.astype(np.uint8), ood


@dataclass
class FakeWatcher:
    current: Any


def _fake_regime(**env: Any) -> tuple[RegimeProcessor, RecordingSink]:
    sink = RecordingSink()
    return RegimeProcessor(RegimeSettings(**env), sink, FakeWatcher(FakeRegimeModel())), sink  # type: ignore[arg-type]


HARDWARE = frozenset(FEATURE_INDEX[n] for n in abstention.DEFAULT_REQUIRED_FEATURES)


def window(node: str, i: int, regime: str, partition: int = 0, ood: float = 0.5,
           invalid: frozenset[int] = frozenset()) -> Ev:
    """A window the fake model labels ``regime`` (with ``invalid`` features and OOD score ``ood``, NaN: none)."""
    if math.isnan(ood):
        ood, invalid = 0.0, invalid | {OOD_COLUMN}
    values = [float(REGIMES.index(regime)), ood] + [0.5] * (N_FEATURES - 2)
    return vector_event(node, T0 + i * 10_000, i, values=values, partition=partition, invalid=invalid)


def test_regime_changelog_records_are_what_older_versions_wrote() -> None:
    proc, sink = _fake_regime(hysteresis_windows=2)
    raws = ["none", "llc", "none", "llc", "llc", "membw", "membw", "membw", "core", "none"]
    asyncio.run(proc.handle_batch([window("n1", i, r) for i, r in enumerate(raws[:4])]))
    asyncio.run(proc.handle_batch([window("n1", i, r) for i, r in enumerate(raws) if i >= 4]))
    labels = [v for _, _, v, _ in sink.sent]
    assert [lab.raw_regime for lab in labels] == raws
    assert [lab.regime for lab in labels] == ["none"] * 4 + ["llc"] * 2 + ["membw"] * 3 + ["membw"]
    # what the previous release wrote after each window: the hysteresis state and the
    # newest REPLAY_HISTORY labels as model_dump(mode="json") dicts
    state: dict[str, Any] | None = None
    history: list[dict[str, Any]] = []
    expected = []
    for lab in labels:
        state = hysteresis.advance(state, lab.raw_regime, lab.ts_ms, windows=2).state
        history = [*history, lab.model_dump(mode="json")][-REPLAY_HISTORY:]
        expected.append((0, b"n1", orjson.dumps({**state, "history": history})))
    # one record per batch: the node's last (a record a later one of the same batch replaces is not sent)
    assert sink.records == [expected[3], expected[-1]]
    assert proc.state.data[b"n1"] == expected[-1][2]


def test_regime_reads_records_in_any_spelling_and_replays_from_them() -> None:
    proc, sink = _fake_regime(hysteresis_windows=3)
    asyncio.run(proc.handle_batch([window("n1", i, "llc") for i in range(3)]))
    record = orjson.loads(proc.state.data[b"n1"])
    sent = [encode(v) for _, _, v, _ in sink.sent]
    # the same record as another writer may spell it: indented, keys reordered, history first
    spelled = orjson.dumps({"history": record["history"], "ts": record["ts"], "count": 0, "candidate": None,
                            "reported": "llc"}, option=orjson.OPT_INDENT_2)
    again, sink2 = _fake_regime(hysteresis_windows=3)
    again.state.data[b"n1"] = spelled
    asyncio.run(again.handle_batch([window("n1", 1, "llc"), window("n1", 3, "membw")]))
    assert encode(sink2.sent[0][2]) == sent[1]  # identical bytes on replay
    new = sink2.sent[1][2]
    assert new.regime == "llc" and new.raw_regime == "membw" and not new.changed
    # the record written after it is in the usual spelling, the old labels byte for byte
    history = ([orjson.dumps(h) for h in record["history"]] + [encode(new)])[-REPLAY_HISTORY:]
    assert again.state.data[b"n1"] == orjson.dumps(
        {"reported": "llc", "candidate": "membw", "count": 1, "ts": new.ts_ms,
         "history": [orjson.loads(h) for h in history]})
    # a record without history (or an empty one) still works
    again.state.data[b"n2"] = orjson.dumps({"reported": "core", "candidate": None, "count": 0, "ts": T0})
    asyncio.run(again.handle_batch([window("n2", 0, "core"), window("n2", 1, "core")]))
    assert [v.regime for _, _, v, _ in sink2.sent[2:]] == ["core"]  # window 0 is stale, not in the history


def _restore(proc: RegimeProcessor, partition: int, records: dict[str, bytes]) -> None:
    # what ChangelogState.restore does with what it read: new bytes objects
    for node, value in records.items():
        proc.state.data[node.encode()] = bytes(bytearray(value))
        proc.state.owner[node.encode()] = partition


def test_regime_decoded_state_follows_forget_and_restore() -> None:
    proc, sink = _fake_regime(hysteresis_windows=2)
    asyncio.run(proc.handle_batch([window("n1", 0, "llc", partition=0), window("n2", 0, "llc", partition=1)]))
    assert set(proc.memory) == {"n1", "n2"}
    # a restore brings another record for n1 (written by another worker meanwhile)
    _restore(proc, 0, {"n1": orjson.dumps({"reported": "none", "candidate": None, "count": 0, "ts": T0,
                                            "history": []})})
    asyncio.run(proc.handle_batch([window("n1", 1, "llc"), window("n2", 1, "core", partition=1)]))
    n1, n2 = (v for _, _, v, _ in sink.sent[2:])
    assert (n1.regime, n1.changed) == ("none", False)  # from the restored record, not the decoded one
    assert (n2.regime, n2.changed) == ("llc", False)
    # partition 0 moves away: n1 is forgotten, its next window starts afresh
    proc.state.forget({0})
    asyncio.run(proc.handle_batch([window("n1", 2, "core")]))
    n1 = sink.sent[-1][2]
    assert (n1.regime, n1.changed) == ("core", True)
    # partition 0 comes back with its changelog: the record restored again wins
    _restore(proc, 0, {"n1": orjson.dumps({"reported": "membw", "candidate": "core", "count": 1, "ts": T0 + 20_000,
                                            "history": []})})
    asyncio.run(proc.handle_batch([window("n1", 3, "core")]))
    n1 = sink.sent[-1][2]
    assert (n1.regime, n1.changed) == ("core", True)  # the second "core" in a row switches


def _labels(sink: RecordingSink) -> list[RegimeLabelV2]:
    return [v for _, _, v, _ in sink.sent]


def test_regime_abstains_with_reasons_no_interference_and_hysteresis_restarts() -> None:
    proc, sink = _fake_regime(hysteresis_windows=2)
    fake: FakeRegimeModel = proc.models.current  # type: ignore[assignment]
    unknown_before = WINDOWS.labels("unknown")._value.get()
    plan: list[tuple[str, frozenset[int], float]] = [
        ("llc", frozenset(), 0.5), ("llc", frozenset(), 0.5),
        ("llc", HARDWARE, math.nan),  # software events only: no IPC, no miss rates
        ("none", frozenset(), 3.0),  # unlike the training windows
        ("none", frozenset({FEATURE_INDEX["ipc_mean_10s"]}), 2.0),  # both
        ("membw", frozenset(), 0.5), ("llc", frozenset(), 0.5), ("llc", frozenset(), 0.5),
    ]
    events = [window("n1", i, r, ood=ood, invalid=bad) for i, (r, bad, ood) in enumerate(plan)]
    asyncio.run(proc.handle_batch(events))
    labels = _labels(sink)
    assert fake.judged == [len(plan)]  # judged once per batch, vectorised
    assert [lab.regime for lab in labels] == ["llc", "llc", "unknown", "unknown", "unknown", "membw", "membw", "llc"]
    assert [lab.changed for lab in labels] == [True, False, True, False, False, True, False, True]
    assert [lab.abstain for lab in labels] == [[], [], ["counters_missing"], ["out_of_distribution"],
                                               ["counters_missing", "out_of_distribution"], [], [], []]
    for lab in labels[2:5]:
        assert lab.raw_regime == "unknown" and lab.interference == {} and lab.confidence == 0.0
    # the score when the model computed one (NaN: not computed), answered windows included
    assert [lab.ood_score for lab in labels] == [0.5, 0.5, None, 3.0, 2.0, 0.5, 0.5, 0.5]
    assert labels[5].raw_regime == "membw" and labels[5].interference == dict.fromkeys(WORKLOAD_CLASSES, 1.5)
    assert WINDOWS.labels("unknown")._value.get() - unknown_before == 3
    # the fast path's bytes are the validated label's
    assert all(raw == encode(RegimeLabelV2(**orjson.loads(raw))) for raw in sink.raw)
    # an odd model (no valid version) goes through validation for unknown windows too, and is refused
    bad, _ = _fake_regime()
    bad.models.current = FakeRegimeModel(version="")  # type: ignore[assignment]
    with pytest.raises(ValueError, match="model_version"):
        asyncio.run(bad.handle_batch([window("n1", 0, "llc", invalid=HARDWARE)]))


def test_regime_unknown_windows_replay_identically_after_a_restart() -> None:
    proc, sink = _fake_regime(hysteresis_windows=2)
    plan = [("llc", frozenset()), ("llc", HARDWARE), ("core", frozenset()), ("core", HARDWARE)]
    events = [window(n, i, r, invalid=bad) for i, (r, bad) in enumerate(plan) for n in ("n1", "n2")]
    asyncio.run(proc.handle_batch(events))
    assert [lab.regime for lab in _labels(sink)[::2]] == ["llc", "unknown", "core", "unknown"]
    again, sink2 = _fake_regime(hysteresis_windows=2)
    again.state.data.update({k: bytes(bytearray(v)) for k, v in proc.state.data.items()})
    unknown_before = WINDOWS.labels("unknown")._value.get()
    asyncio.run(again.handle_batch(events))  # everything re-delivered after a crash
    assert sink2.raw == sink.raw  # the same bytes for the same (node, ts_ms), unknown ones included
    assert sink2.changelog_writes == 0 and WINDOWS.labels("unknown")._value.get() == unknown_before
    # the next window continues from the restored state: the first answered one after unknown is reported
    asyncio.run(again.handle_batch([window("n1", 4, "membw")]))
    assert (_labels(sink2)[-1].regime, _labels(sink2)[-1].changed) == ("membw", True)


def test_regime_unknown_span_names_the_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    from services.runtime.stream_trace import stage_span as real

    def recording(*args: Any, attributes: dict[str, Any], **kw: Any) -> Any:
        seen.append(dict(attributes))
        return real(*args, attributes=attributes, **kw)

    monkeypatch.setattr(regime_processor, "stage_span", recording)
    # as with a span processor (an OTLP endpoint): without one, no span is made and nothing reads attributes
    monkeypatch.setattr(regime_processor, "quiet_stage", lambda headers: None)
    proc, _ = _fake_regime()
    asyncio.run(proc.handle_batch([window("n1", 0, "llc"), window("n1", 1, "llc", invalid=HARDWARE, ood=4.0)]))
    from contracts import telemetry as names

    assert names.REGIME_ABSTAIN in names.SPAN_ATTRIBUTES
    assert names.REGIME_ABSTAIN not in seen[0] and seen[0][names.REGIME_LABEL] == "llc"
    assert seen[1][names.REGIME_ABSTAIN] == "counters_missing,out_of_distribution"
    assert seen[1][names.REGIME_LABEL] == "unknown"


def test_real_model_abstains_on_a_node_without_hardware_counters(model_root: Path) -> None:
    """What a VM without a PMU publishes: software events only, so no IPC and no miss rates."""
    proc, sink = _regime(model_root)
    hardware = frozenset(i for n, i in FEATURE_INDEX.items()
                         if n.split("_")[0] in ("ipc", "cpi", "llc", "cache", "branch", "stall", "inst", "membw"))
    asyncio.run(proc.handle_batch([vector_event("vm", T0 + i * 10_000, i, invalid=hardware) for i in range(3)]))
    labels = _labels(sink)
    assert [lab.regime for lab in labels] == ["unknown"] * 3
    assert all("counters_missing" in lab.abstain and lab.interference == {} for lab in labels)


def test_regime_sweeps_decoded_state_of_forgotten_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regime_processor, "MEMORY_SLACK", 2)
    proc, _ = _fake_regime()
    asyncio.run(proc.handle_batch([window(f"n{i}", 0, "llc", partition=i % 2) for i in range(8)]))
    assert len(proc.memory) == 8
    proc.state.forget({0})
    asyncio.run(proc.handle_batch([window("n1", 1, "llc", partition=1)]))
    assert sorted(proc.memory) == ["n1", "n3", "n5", "n7"]


def test_regime_labels_equal_validated_ones_and_odd_models_are_still_validated() -> None:
    proc, sink = _fake_regime()
    asyncio.run(proc.handle_batch([window("n1", i, r) for i, r in enumerate(["none", "llc", "llc"])]))
    assert len(sink.raw) == len(sink.sent) == 3
    for raw, (_, _, label, _) in zip(sink.raw, sink.sent, strict=True):
        # the bytes sent are exactly what encoding the validated label writes
        assert raw == encode(label) == encode(RegimeLabelV2(**orjson.loads(raw)))
    # a model whose version is no valid Name: labels are validated (and refused) as before
    bad, _ = _fake_regime()
    bad.models.current = FakeRegimeModel(version="")  # type: ignore[assignment]
    with pytest.raises(ValueError, match="model_version"):
        asyncio.run(bad.handle_batch([window("n1", 0, "llc")]))
    assert bad.state.data == {}


def test_bounds_the_processors_trust_are_the_contracts() -> None:
    from pydantic import ValidationError

    from services.anomaly import processor as anomaly_processor

    base = {"node": "n", "ts_ms": T0, "regime": "llc", "confidence": 1.0, "raw_regime": "llc", "changed": False,
            "interference": {"cpu_bound": 1.0}, "model_version": "v", "input_ts_ms": T0}
    lo, hi, name = regime_processor._SLOWDOWN_MIN, regime_processor._SLOWDOWN_MAX, regime_processor._NAME_MAX
    assert name == anomaly_processor._NAME_MAX
    for ok in ({"interference": {"a": lo, "b": hi}}, {"model_version": "v" * name}, {"ood_score": 0.0},
               {"regime": "unknown", "raw_regime": "unknown", "interference": {}, "abstain": ["low_confidence"]}):
        RegimeLabelV2.model_validate({**base, **ok})
    for bad in ({"interference": {"a": math.nextafter(lo, 0)}}, {"interference": {"a": math.nextafter(hi, 200)}},
                {"model_version": "v" * (name + 1)}, {"model_version": ""}, {"ood_score": -0.0001},
                {"regime": "unknown", "abstain": []}, {"abstain": ["counters_missing"]},
                {"regime": "unknown", "abstain": ["counters_missing"]}):  # unknown with interference
        with pytest.raises(ValidationError):
            RegimeLabelV2.model_validate({**base, **bad})
    score = {"node": "n", "ts_ms": T0, "score": 0.0, "is_anomaly": False, "threshold": 1.0, "model_version": "v" * name,
             "input_ts_ms": T0}
    AnomalyScore.model_validate(score)
    with pytest.raises(ValidationError):
        AnomalyScore.model_validate({**score, "model_version": "v" * (name + 1)})


def test_model_failure_is_isolated_to_its_row() -> None:
    def flaky(x: np.ndarray) -> tuple[np.ndarray]:
        if np.any(x[:, 0] > 1e6):
            raise RuntimeError("boom")
        out = x[:, 0].copy()
        out[x[:, 0] < 0] = np.nan
        return (out,)

    x = np.array([[1.0], [2e6], [-1.0], [3.0]])
    results, errors = infer_rows(flaky, x)
    assert [r is None for r in results] == [False, True, True, False]
    assert "boom" in errors[1] and "not finite" in errors[2]


def test_regime_model_with_another_schema_is_refused(model_root: Path, tmp_path: Path) -> None:
    import shutil

    target = tmp_path / "regime" / "r1"
    shutil.copytree(resolve(model_root / "regime"), target)
    card = orjson.loads((target / "model_card.json").read_bytes())
    card["features"]["schema_hash"] = "b" * 64
    (target / "model_card.json").write_bytes(orjson.dumps(card))
    with pytest.raises(ModelRefusedError, match=r"feature schema .* retrain"):
        load_regime_model(target)


def test_model_hot_reload_swaps_only_valid_versions(model_root: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "regime"
    shutil.copytree(resolve(model_root / "regime"), root / "v1")
    (root / "CURRENT").write_text("v1\n")
    watcher = ModelWatcher("regime", root, load_regime_model, poll_s=60)
    assert watcher.current.version == "r1" and not watcher.check()
    shutil.copytree(root / "v1", root / "v2")
    card = orjson.loads((root / "v2" / "model_card.json").read_bytes())
    card["version"] = "r2"
    (root / "v2" / "model_card.json").write_bytes(orjson.dumps(card))
    (root / "CURRENT").write_text("v2\n")
    assert watcher.check() and watcher.current.version == "r2"
    shutil.copytree(root / "v1", root / "v3")
    card["features"]["schema_hash"] = "c" * 64
    (root / "v3" / "model_card.json").write_bytes(orjson.dumps(card))
    (root / "CURRENT").write_text("v3\n")
    assert not watcher.check() and watcher.current.version == "r2"  # refused, old one keeps serving


# ---------------------------------------------------------------------------------- anomaly


def test_anomaly_scores_batch_and_flags_outliers(model_root: Path) -> None:
    sink = RecordingSink()
    watcher = ModelWatcher("anomaly", model_root / "anomaly", load_anomaly_model, poll_s=60)
    proc = AnomalyProcessor(AnomalySettings(), sink, watcher)  # type: ignore[arg-type]
    model = watcher.current
    assert 0.0 < model.threshold < 1.0
    events = [vector_event(f"n{i}", T0 + 10_000, i) for i in range(5)]
    events.append(vector_event("bad", T0, 7, values=[1.0] * 5))
    asyncio.run(proc.handle_batch(events))
    scores = [v for _, _, v, _ in sink.sent]
    assert len(scores) == 5 and all(isinstance(s, AnomalyScore) for s in scores)
    assert all(0.0 <= s.score <= 1.0 and s.is_anomaly == (s.score >= s.threshold) for s in scores)
    assert [k for _, _, k in sink.letters] == ["schema"]
    # random vectors far outside the simulator's ranges score higher than the model's threshold
    assert max(s.score for s in scores) >= model.threshold


def _reference_inputs(events: list[Ev]) -> tuple[list[FeatureVector], np.ndarray]:
    vectors = [decode(FeatureVector, e.message.value) for e in events]
    return vectors, np.stack([as_model_input(v.values, v.valid) for v in vectors])


def test_outputs_are_the_bytes_of_the_per_row_computation(model_root: Path) -> None:
    """Both processors send what the per-row code of earlier releases built, byte for byte."""
    events = [vector_event(f"n{i % 7}", T0 + (i // 7) * 10_000, i) for i in range(60)]
    vectors, x = _reference_inputs(events)
    sink = RecordingSink()
    watcher = ModelWatcher("anomaly", model_root / "anomaly", load_anomaly_model, poll_s=60)
    asyncio.run(AnomalyProcessor(AnomalySettings(), sink, watcher).handle_batch(events))  # type: ignore[arg-type]
    model = watcher.current
    (scores,) = model(x)
    want = [AnomalyScore(node=v.node, ts_ms=v.ts_ms, score=float(s), is_anomaly=float(s) >= model.threshold,
                         threshold=model.threshold, model_version=model.version, input_ts_ms=v.input_ts_ms)
            for v, s in zip(vectors, scores, strict=True)]
    assert [encode(v) for _, _, v, _ in sink.sent] == [encode(w) for w in want]

    proc, rsink = _regime(model_root, hysteresis_windows=2)
    asyncio.run(proc.handle_batch(events))
    regime = proc.models.current
    probs, slowdown = regime(x)
    masks, oods = regime.judge(x, probs)
    state: dict[str, dict[str, Any]] = {}
    labels = []
    for v, p, sd, mask, ood in zip(vectors, probs, slowdown, masks, oods, strict=True):
        score = float(ood) if np.isfinite(ood) else None
        if mask:
            step = hysteresis.abstain(state.get(v.node), v.ts_ms)
            labels.append(RegimeLabelV2(
                node=v.node, ts_ms=v.ts_ms, regime="unknown", confidence=0.0, raw_regime="unknown",
                changed=step.changed, interference={}, abstain=abstention.reasons_of(int(mask)),  # type: ignore[arg-type]
                ood_score=score, model_version=regime.version, input_ts_ms=v.input_ts_ms))
        else:
            raw = regime.regimes[int(np.argmax(p))]
            step = hysteresis.advance(state.get(v.node), raw, v.ts_ms, windows=2)
            labels.append(RegimeLabelV2(
                node=v.node, ts_ms=v.ts_ms, regime=step.regime,  # type: ignore[arg-type]
                confidence=float(np.clip(p[regime.regimes.index(step.regime)], 0.0, 1.0)),
                raw_regime=raw, changed=step.changed,  # type: ignore[arg-type]
                interference={c: float(s) for c, s in zip(regime.card["outputs"]["workload_classes"], sd,
                                                          strict=True)},
                ood_score=score, model_version=regime.version, input_ts_ms=v.input_ts_ms))
        state[v.node] = step.state
    assert [encode(v) for _, _, v, _ in rsink.sent] == [encode(lab) for lab in labels]


def test_service_refuses_a_mismatched_model_at_start_up(model_root: Path, tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    target = tmp_path / "bad"
    shutil.copytree(resolve(model_root / "regime"), target)
    card = orjson.loads((target / "model_card.json").read_bytes())
    card["features"]["schema_hash"] = "d" * 64
    (target / "model_card.json").write_bytes(orjson.dumps(card))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "REGIME_MODEL_DIR": str(target), "KAFKA_BOOTSTRAP": "127.0.0.1:1", "LOG_FORMAT": "text",
           "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "services.regime"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "was trained on feature schema dddddddddddd" in done.stderr
    assert "retrain" in done.stderr


def test_training_writes_versioned_artifacts_with_cards(model_root: Path) -> None:
    for kind, version in (("regime", "r1"), ("anomaly", "a1")):
        root = model_root / kind
        assert (root / "CURRENT").read_text().strip() == version
        card = orjson.loads((root / version / "model_card.json").read_bytes())
        assert card["model"] == kind and card["version"] == version
        assert card["features"]["schema_hash"] == node_feature_schema_hash()
        assert card["training_command"].startswith(f"borgctl train {kind}")
        assert card["metrics"] and card["onnx"]["sha256"]
    regime = orjson.loads((model_root / "regime" / "r1" / "model_card.json").read_bytes())
    held = regime["metrics"]["heldout_kinds"]
    assert set(regime["data"]["heldout_kinds"]).isdisjoint(regime["data"]["train_kinds"])
    assert held["windows"] > 0 and held["accuracy"] > held["chance_accuracy"]  # better than guessing, unseen kinds
    anomaly = orjson.loads((model_root / "anomaly" / "a1" / "model_card.json").read_bytes())
    assert anomaly["metrics"]["injected_anomalies"]["roc_auc"] > 0.6


def test_shipped_models_match_the_feature_schema() -> None:
    """`make run` on a fresh clone serves the committed models: they must load with this code."""
    root = Path(__file__).resolve().parents[2] / "models"
    assert load_regime_model(resolve(root / "regime")).version
    assert load_anomaly_model(resolve(root / "anomaly")).version
