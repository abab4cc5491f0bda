"""Real Kafka, the real regime process and the shipped model: a node that cannot be judged is ``unknown``.

Three simulated nodes' NodeStates go through ``featurelib`` offline (what the features stage
computes) and their FeatureVectors are produced to ``features.v1``: one with full hardware
counters, one as the node agent publishes on a VM without a PMU (software events only, hardware
events ``not_supported``), one whose hardware counters were multiplexed for 2 % of the time
(below ``MULTIPLEX_MIN_FRACTION``). On regimes.v2 the last two are ``unknown`` with
``counters_missing`` and no interference, every window; the first gets regimes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contracts import FeatureVector, RegimeLabelV2
from contracts.topics import REGIMES_TOPIC
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import node_feature_schema_hash
from featurelib.node.windows import features_for_stream
from services.node_agent.events import CACHE_EVENTS, HARDWARE_EVENTS
from simulator import SyntheticCluster
from tests.integration.test_stream_pipeline import collector, running, spawn, wait_ready
from tests.kafka_helpers import produce_contracts

pytestmark = [pytest.mark.integration]

FULL, VM, THIN = "sim-full", "vm-no-pmu", "thin-mux"
HARDWARE = frozenset({*HARDWARE_EVENTS, *CACHE_EVENTS, "LLC-loads", "LLC-load-misses", "mem-bandwidth-bytes",
                      "stalled-cycles-frontend", "stalled-cycles-backend"})


def as_vm(state: dict[str, Any]) -> dict[str, Any]:
    """The NodeState of the live agent on a VM without a PMU: hardware events could not be opened."""
    counters = {name: ({"raw": None, "value": None, "enabled_ns": 0, "running_ns": 0, "status": "not_supported"}
                       if name in HARDWARE else c) for name, c in state["counters"].items()}
    software = sorted(n for n in counters if n not in HARDWARE)
    return {**state, "node": VM, "pmu": "software", "source": "software", "supported_events": software,
            "counters": counters}


def as_thin(state: dict[str, Any]) -> dict[str, Any]:
    """Hardware counters multiplexed for 2 % of the time (the scaled value is extrapolated ×50)."""
    counters = {}
    for name, c in state["counters"].items():
        if name in HARDWARE and c["status"] != "not_supported":
            c = {**c, "running_ns": c["enabled_ns"] // 50, "status": "multiplexed"}
        counters[name] = c
    return {**state, "node": THIN, "counters": counters}


def vectors(ticks: int) -> list[FeatureVector]:
    # seed 6: the shipped model answers every window of this node (it abstains with low_confidence
    # on ~3/4 of windows of the training kinds, so most seeds give it nothing to answer; a new model
    # may need another seed: run its judge on this node's windows offline to pick one)
    sim = SyntheticCluster(nodes=1, seed=6, missing_event_prob=0.0, multiplex_prob=0.0)
    states = []
    for batch in sim.run(ticks):
        (state,) = batch.nodestate_dicts()
        states += [{**state, "node": FULL}, as_vm(state), as_thin(state)]
    windows = features_for_stream([sample_from_dict(s) for s in states])
    schema = node_feature_schema_hash()
    return [FeatureVector(node=w.node, ts_ms=w.ts_ms, window_s=10, schema_hash=schema, values=w.values,
                          valid=w.valid, samples=w.samples, input_ts_ms=w.input_ts_ms) for w in windows]


async def test_regime_answers_unknown_for_nodes_without_usable_counters(kafka_bootstrap: str, topic_prefix: str,
                                                                       tmp_path: Path) -> None:
    produced = vectors(ticks=60)
    want = {(v.node, v.ts_ms) for v in produced}
    assert {n for n, _ in want} == {FULL, VM, THIN}
    service = spawn("regime", kafka_bootstrap, topic_prefix, tmp_path)
    with running(service):
        await wait_ready((service,))
        async with collector(kafka_bootstrap, topic_prefix, [REGIMES_TOPIC]) as (got, poll_until):
            await produce_contracts(kafka_bootstrap, topic_prefix, "features.v1", [(v.node, v) for v in produced])
            await poll_until(lambda g: {(lab.node, lab.ts_ms) for lab in g.values(REGIMES_TOPIC, RegimeLabelV2)}
                             >= want, 60, f"{len(want)} labels on {REGIMES_TOPIC}")
    labels = got.values(REGIMES_TOPIC, RegimeLabelV2)  # decoded strictly: the v2 contract holds
    by_node: dict[str, list[RegimeLabelV2]] = {FULL: [], VM: [], THIN: []}
    for lab in labels:
        by_node[lab.node].append(lab)
    print("\n" + "; ".join(f"{node}: {len(labs)} windows, regimes {sorted({lab.regime for lab in labs})}"
                            for node, labs in by_node.items()))
    for node in (VM, THIN):
        assert by_node[node], node
        for lab in by_node[node]:
            assert (lab.regime, lab.raw_regime, lab.confidence) == ("unknown", "unknown", 0.0), lab
            assert "counters_missing" in lab.abstain and lab.interference == {}, lab
    full = by_node[FULL]
    assert full and all("counters_missing" not in lab.abstain for lab in full)
    answered = [lab for lab in full if lab.regime != "unknown"]
    assert answered, [lab.abstain for lab in full]
    assert all(set(lab.interference) and lab.confidence > 0.0 for lab in answered)
