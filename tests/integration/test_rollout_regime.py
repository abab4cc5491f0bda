"""Real Kafka, a real regime process: a good candidate is rolled out to 100 %, a bad one rolled back before.

The model root is built by the test from shipped versions: ``CURRENT`` = 20261126-232416-sim, the good
candidate = 20261127-0228-sim-v24d4 (same feature schema; on this traffic more accurate when it answers,
answering a little less often), the bad candidate = the current model with its card's regime names
reversed (``bad-permuted``: the same ONNX files and abstentions, wrong labels; nothing is trained).
Traffic: simulated windows (``training/regime/simwindows.py``, the features stage's code) with their
ground truth written to the truth side channel file the stage tails (``REGIME_TRUTH_FILE``), replayed
again and again with event time moving on. Steps dwell 1.5 s; a judgement needs 100 labelled answers.
"""

from __future__ import annotations

import asyncio
import math
import shutil
from pathlib import Path

import orjson
import pytest

from borgctl import model as model_cli
from contracts import FeatureVector, decode
from contracts.models import REGIMES, RolloutEvent
from contracts.topics import REGIMES_TOPIC, Topic
from featurelib.node.schema import node_feature_schema_hash
from services.runtime import rollout
from services.runtime.rollout_watch import HEADER
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts
from training.regime.simwindows import simulate_windows

pytestmark = [pytest.mark.integration]

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "regime"
CURRENT, GOOD, BAD = "20261126-232416-sim", "20261127-0228-sim-v24d4", "bad-permuted"
NODES, TICKS, SEED = 40, 200, 7
DWELL_S = 1.5


def model_root(tmp: Path) -> Path:
    root = tmp / "regime"
    root.mkdir()
    for version in (CURRENT, GOOD):
        shutil.copytree(SHIPPED / version, root / version)
    shutil.copytree(SHIPPED / CURRENT, root / BAD)
    card = orjson.loads((root / BAD / "model_card.json").read_bytes())
    card["version"] = BAD
    card["outputs"]["regimes"] = list(reversed(card["outputs"]["regimes"]))
    (root / BAD / "model_card.json").write_bytes(orjson.dumps(card))
    (root / "CURRENT").write_text(CURRENT + "\n")
    return root


class Traffic:
    """The simulated windows again and again, each pass later in event time; truth first, then features."""

    def __init__(self, truth_file: Path) -> None:
        w = simulate_windows(kinds=None, nodes=NODES, ticks=TICKS, seed=SEED)
        self.span_ms = int(w.ts_ms.max() - w.ts_ms.min()) + 10_000
        self.windows = []
        for x, node, ts, regime in zip(w.x, w.node, w.ts_ms, w.regime, strict=True):
            values = [0.0 if math.isnan(v) else float(v) for v in x.tolist()]
            self.windows.append((str(node), int(ts), values, [not math.isnan(v) for v in x.tolist()], REGIMES[regime]))
        self.truth_file = truth_file
        self.passes = 0

    async def send(self, bootstrap: str, prefix: str) -> None:
        shift = self.passes * self.span_ms
        self.passes += 1
        with self.truth_file.open("ab") as out:  # one tick inside each window's pane is its label
            out.write(b"".join(orjson.dumps({"node": n, "ts_ms": ts + shift - 1, "regime": r}) + b"\n"
                               for n, ts, _, _, r in self.windows))
        await produce_contracts(bootstrap, prefix, "features.v1", [
            (n, FeatureVector(node=n, ts_ms=ts + shift, window_s=10, schema_hash=node_feature_schema_hash(),
                              values=v, valid=ok, samples=10, input_ts_ms=ts + shift))
            for n, ts, v, ok, _ in self.windows])


async def drive(traffic: Traffic, bootstrap: str, prefix: str, root: Path, *, until: set[str],
                timeout: float) -> rollout.RolloutState:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = rollout.read_state(root)
        assert state is not None
        if state.status in until:
            return state
        assert asyncio.get_running_loop().time() < deadline, f"rollout still {state.status} step {state.step + 1}"
        await traffic.send(bootstrap, prefix)
        await asyncio.sleep(0.3)


async def test_good_candidate_reaches_all_nodes_and_bad_one_is_rolled_back(kafka_bootstrap: str, topic_prefix: str,
                                                                          tmp_path: Path) -> None:
    root = model_root(tmp_path)
    truth = tmp_path / "truth.jsonl"
    traffic = Traffic(truth)
    regime = spawn("regime", kafka_bootstrap, topic_prefix, tmp_path, REGIME_MODEL_DIR=str(root),
                   REGIME_TRUTH_FILE=str(truth), REGIME_ROLLOUT_POLL_S="0.3", REGIME_ROLLOUT_MIN_SAMPLES="100",
                   REGIME_ROLLOUT_MARGIN="0.1", LOG_LEVEL="INFO")
    with running(regime):
        await wait_ready((regime,))
        model_cli.start(root, GOOD, progressive=True, dwell_s=DWELL_S)
        good = await drive(traffic, kafka_bootstrap, topic_prefix, root, until={"promoted", "rolled_back"},
                           timeout=30)
        assert good.status == "promoted", good.reason
        assert rollout.current_version(root) == GOOD
        assert (root / "CURRENT.history").read_text() == CURRENT + "\n"
        steps = [(e["status"], e["step"]) for e in rollout.read_events(root)]
        assert steps == [("running", 1), ("running", 2), ("running", 3), ("promoted", 3)], steps
        shadow = rollout.read_events(root)[-1]["shadow"]
        print(f"\ngood candidate: {shadow}")
        assert shadow["labelled"] >= 100
        assert shadow["matched_accuracy_candidate"] >= shadow["matched_accuracy_current"] - 0.1

        model_cli.start(root, BAD, progressive=True, dwell_s=DWELL_S)
        bad = await drive(traffic, kafka_bootstrap, topic_prefix, root, until={"promoted", "rolled_back"},
                          timeout=20)
        assert bad.status == "rolled_back", bad
        assert bad.fraction == 0.0 and bad.step + 1 < len(bad.steps), "rolled back before 100 %"
        assert "matched_accuracy" in bad.reason, bad.reason
        assert rollout.current_version(root) == GOOD
        print(f"bad candidate rolled back at step {bad.step + 1}: {bad.reason}")

        # outputs name the model that answered and, during the rollout, the step; rollouts.v1 has every move
        async with collector(kafka_bootstrap, topic_prefix, [REGIMES_TOPIC, Topic.ROLLOUTS]) as (got, poll_until):
            await poll_until(lambda g: len(g.records[REGIMES_TOPIC]) >= traffic.passes * len(traffic.windows) // 2
                             and any(decode(RolloutEvent, r.value).status == "rolled_back"
                                     for r in g.records[Topic.ROLLOUTS]), 20, "regimes.v2 of the traffic, rollouts.v1")
        events = [decode(RolloutEvent, r.value) for r in got.records[Topic.ROLLOUTS]]
        moves = [(e.candidate, e.origin, e.status, e.step) for e in events]
        assert moves[:5] == [(GOOD, "observed", "running", 1), (GOOD, "judged", "running", 2),
                             (GOOD, "judged", "running", 3), (GOOD, "judged", "promoted", 3),
                             (BAD, "observed", "running", 1)], moves
        assert moves[-1][:3] == (BAD, "judged", "rolled_back") and moves[-1][3] == bad.step + 1, moves
        assert {r.key for r in got.records[Topic.ROLLOUTS]} == {b"regime"}
        assert "matched_accuracy" in events[-1].reason and events[-1].labelled >= 100, events[-1]
        assert events[-1].metrics["matched_accuracy_candidate"] < events[-1].metrics["matched_accuracy_current"]
        records = got.records[REGIMES_TOPIC]
        versions = {orjson.loads(r.value)["model_version"] for r in records}
        assert {CURRENT, GOOD} <= versions, versions
        stepped = {dict(r.headers).get(HEADER, b"").decode() for r in records} - {""}
        assert any(f"{GOOD};step=1/3" in h for h in stepped) and any(f"{GOOD};step=2/3" in h for h in stepped), stepped
        assert any(h.startswith(BAD) for h in stepped), stepped
    log = regime.log.read_text()
    assert f"rollout of {BAD} rolled back" in log, log[-2000:]
