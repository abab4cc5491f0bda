"""One list of canonical counter names: the node agent, the simulator and the features share it."""

from __future__ import annotations

from featurelib.node import counters
from featurelib.node.samples import COUNTERS_USED
from services.node_agent import events
from simulator import cluster


def test_node_agent_and_simulator_use_the_one_list() -> None:
    # identity, not equality: a second copy of the names would pass an equality check until it drifted
    assert events.HARDWARE_EVENTS is counters.HARDWARE_EVENTS
    assert events.CACHE_EVENTS is counters.CACHE_EVENTS
    assert events.CANONICAL_EVENTS is counters.CANONICAL_EVENTS
    assert events.MEM_BANDWIDTH_BYTES is counters.MEM_BANDWIDTH_BYTES
    assert cluster.EVENTS is counters.NODE_COUNTERS


def test_node_counters_are_canonical_and_distinct() -> None:
    assert set(counters.NODE_COUNTERS) <= counters.CANONICAL_EVENTS
    assert len(set(counters.NODE_COUNTERS)) == len(counters.NODE_COUNTERS)
    assert counters.TIME_EVENTS_NS <= counters.CANONICAL_EVENTS


def test_features_read_the_node_counters_in_their_order_without_the_frequency_proxy() -> None:
    assert "ref-cycles" not in COUNTERS_USED and "cpu-migrations" not in COUNTERS_USED
    assert list(COUNTERS_USED) == [c for c in counters.NODE_COUNTERS if c in COUNTERS_USED]
    assert len(COUNTERS_USED) == len(counters.NODE_COUNTERS) - 2
