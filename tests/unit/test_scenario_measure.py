"""`borgctl load` measuring parts without a broker: latency extraction, observer bookkeeping,
key distributions, service selection and the command line."""

from __future__ import annotations

import base64
import itertools
from collections import Counter
from pathlib import Path

import orjson
import pytest

from borgctl.registry import ServiceEntry
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC
from loadtests import scenario
from loadtests.keydist import ZipfKeys, ZipfSource, with_seq, zipf_weights
from loadtests.observe import FeatureWindow, OutputObserver, nodestate_id, output_latency_ms
from loadtests.procs import group_env, select_services
from loadtests.sources import Chunk, Clock


def test_latency_is_output_time_minus_input_time() -> None:
    assert output_latency_ms(REGIMES_TOPIC, {"input_ts_ms": 1_000}, 1_120) == 120.0
    assert output_latency_ms("features.v1", {"ts_ms": 5}, 1_120) is None
    decision = {"proposals": [{"input_ts_ms": 900}, {"input_ts_ms": 1_000}, {"input_ts_ms": None}]}
    assert output_latency_ms("decisions.v1", decision, 1_600) == 600.0  # the newest input it weighed
    assert output_latency_ms("decisions.v1", {"proposals": []}, 1_600) is None


def test_observer_counts_outputs_windows_and_dead_letters() -> None:
    obs = OutputObserver("unused:9092", "p-", keep_windows=True)
    fv = {"node": "sim-00001", "ts_ms": 20_000, "window_s": 10, "samples": 10, "input_ts_ms": 19_990}
    obs.take("features.v1", b"sim-00001", orjson.dumps(fv), 20_030)
    obs.take("features.v1", b"sim-00001", b"{not json", 20_031)
    state = {"node": "sim-00007", "seq": 42}
    letter = {"source_topic": "p-nodestate.v1", "error_kind": "schema",
              "value": {"b64": base64.b64encode(orjson.dumps(state)).decode()}}
    obs.take("deadletter.v2", b"p-nodestate.v1", orjson.dumps(letter), 21_000)
    obs.take("deadletter.v2", b"p-nodestate.v1", orjson.dumps({**letter, "value": {"b64": "bm90IGpzb24="}}), 21_500)
    assert obs.series["features.v1"].count == 1
    assert list(obs.series["features.v1"].latency_ms) == [40.0]
    assert obs.series["features.v1"].latencies_between(20.0, 21.0) == [40.0]
    assert obs.windows == [FeatureWindow("sim-00001", 20_000, 10, 10)]
    assert obs.decode_errors == 1
    assert obs.dead_letters == Counter({("nodestate.v1", "schema"): 2})
    assert obs.dead_nodestates == {("sim-00007", 42)}
    assert obs.dead_unattributed == 1
    assert obs.dead_letter_count(21.0, 21.2) == 1


def test_observer_keeps_per_window_answers_and_rejected_windows() -> None:
    obs = OutputObserver("unused:9092", "p-", keep_windows=True)
    label = {"node": "n1", "ts_ms": 20_000, "input_ts_ms": 19_000}
    obs.take(REGIMES_TOPIC, b"n1", orjson.dumps(label), 20_100)
    obs.take(RISK_TOPIC, b"n1", orjson.dumps({**label, "target_kind": "node", "target": "n1"}), 20_100)
    vector = {"node": "n2", "ts_ms": 30_000}
    letter = {"source_topic": "p-features.v1", "error_kind": "processing", "service": "anomaly",
              "value": {"b64": base64.b64encode(orjson.dumps(vector)).decode()}}
    obs.take("deadletter.v2", b"p-features.v1", orjson.dumps(letter), 30_100)
    assert obs.window_outputs[REGIMES_TOPIC] == {("n1", 20_000)}
    assert RISK_TOPIC not in obs.window_outputs  # risk is not one-answer-per-window
    assert list(obs.series[RISK_TOPIC].latency_ms) == [1_100.0]
    assert obs.dead_windows == {"anomaly": {("n2", 30_000)}}


def test_nodestate_id_of_unparseable_letter_is_none() -> None:
    assert nodestate_id({"value": None}) is None
    assert nodestate_id({"value": {"b64": base64.b64encode(b'{"node": "a"}').decode()}}) is None


def test_zipf_weights_are_normalised_and_decreasing() -> None:
    w = zipf_weights(100, 1.1)
    assert sum(w) == pytest.approx(1.0)
    assert all(a > b for a, b in itertools.pairwise(w))
    assert zipf_weights(0, 1.1) == []


def _records(n: int, seq: int) -> list[tuple[bytes, bytes]]:
    return [(f"n{i}".encode(), b'{"node":"n%d","ts_ms":1,"seq":%d,"x":1}' % (i, seq)) for i in range(n)]


def test_zipf_keeps_volume_skews_keys_and_keeps_seq_gap_free() -> None:
    keys = ZipfKeys(1.1)
    out: list[tuple[bytes, bytes]] = []
    for tick in range(50):
        out += keys.apply(_records(100, tick))
    assert abs(len(out) - 50 * 100) <= 100  # carried-over credit: the rate is unchanged
    counts = Counter(k for k, _ in out)
    assert counts[b"n0"] > 10 * counts[b"n20"]  # hot key
    seqs: dict[bytes, list[int]] = {}
    for key, value in out:
        seqs.setdefault(key, []).append(orjson.loads(value)["seq"])
    assert all(s == list(range(len(s))) for s in seqs.values())


def test_with_seq_rewrites_only_the_top_level_seq() -> None:
    assert with_seq(b'{"node":"a","seq":7,"x":{"y":1}}', 3) == b'{"node":"a","seq":3,"x":{"y":1}}'
    with pytest.raises(ValueError, match="seq"):
        with_seq(b'{"task_id":"t"}', 1)


class _TaskSource:
    base_topic = "taskevents.v1"
    what = "TaskEvent"

    def chunks(self, clock: Clock) -> list[Chunk]:
        return []


def test_zipf_source_refuses_non_nodestate_sources() -> None:
    with pytest.raises(ValueError, match="NodeState"):
        ZipfSource(_TaskSource())  # type: ignore[arg-type]


def test_select_services_keeps_pipeline_order_and_skips_missing() -> None:
    fake = (
        ServiceEntry("referee", "json", "x"),
        ServiceEntry("features", "os", "x"),
        ServiceEntry("regime", "services.does_not_exist_here", "x"),
    )
    assert select_services("all", fake) == ["features", "referee"]
    assert select_services("stream", fake) == ["features"]
    assert select_services("none", fake) == []
    assert select_services("referee,features", fake) == ["referee", "features"]
    with pytest.raises(ValueError, match="unknown"):
        select_services("nope", fake)
    with pytest.raises(ValueError, match="not available"):
        select_services("regime", fake)


def test_group_env_names_groups_with_the_run_prefix() -> None:
    assert group_env("referee", "load1-") == {"REFEREE_GROUP_ID": "load1-referee"}
    assert group_env("agent-reliability", "load1-") == {"AGENT_RELIABILITY_GROUP_ID": "load1-agent-reliability"}
    assert group_env("features", "load1-") == {}


@pytest.mark.parametrize(
    "argv",
    [
        ["ramp", "--steps", "1000,abc", "--out", "x"],
        ["ramp", "--hold", "0", "--out", "x"],
        ["ramp", "--services", "no-such-service", "--out", "x"],
        ["ramp", "--env", "NOEQUALS", "--out", "x"],
        ["soak", "--rate", "0", "--out", "x"],
        ["soak", "--rate", "100", "--keys", "zipf", "--out", "x"],
        ["ramp", "--profile", "features", "--out", "x"],
    ],
)
def test_usage_errors_exit_2_without_touching_kafka(argv: list[str], tmp_path: Path) -> None:
    argv = [a if a != "x" else str(tmp_path / "out") for a in argv]
    assert scenario.main(argv) == 2
    assert not (tmp_path / "out").exists()


def test_task_events_are_valid_contracts_at_the_asked_rate() -> None:
    from contracts import TaskEvent, decode
    from loadtests.taskgen import TaskEvents

    gen = TaskEvents(30.0, lifetime_s=5.0, seed=1)
    events = []
    for second in range(20):
        events += gen.tick(float(second), 1_800_000_000_000 + second * 1000, nodes=4)
    decoded = [decode(TaskEvent, value) for _, value in events]
    assert 20 * 30 * 0.8 <= len(decoded) <= 20 * 30
    kinds = Counter(e.event for e in decoded)
    assert kinds["SUBMIT"] == kinds["SCHEDULE"] == 200
    assert kinds["FINISH"] + kinds["FAIL"] == 200 - 5 * 10  # those started in the last 5 s still run
    assert all(e.machine in {"sim-00000", "sim-00001", "sim-00002", "sim-00003"} for e in decoded
               if e.event == "SCHEDULE")
    assert all(key == e.task_id.encode() for (key, _), e in zip(events, decoded, strict=True))


def test_proc_sampler_follows_a_restarted_process() -> None:
    import subprocess

    from loadtests.observe import ProcSampler

    first = subprocess.Popen(["sleep", "30"])
    second = subprocess.Popen(["sleep", "30"])
    try:
        current = {"pid": first.pid}
        sampler = ProcSampler(system=False)
        sampler.watch("broker", first.pid, resolve=lambda: current["pid"])
        sampler.sample_once()
        first.kill()
        first.wait()
        current["pid"] = second.pid
        sampler.sample_once()
        assert len(sampler.restarts["broker"]) == 1
        assert [s.name for s in sampler.samples] == ["broker", "broker"]
        assert all(s.rss_mb > 0 for s in sampler.samples)
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()
