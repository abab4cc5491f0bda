"""API discovery → which actions the cluster supports (pure)."""

from __future__ import annotations

from typing import Any

from services.referee.capabilities import REQUIRES, Capabilities


def doc(group_version: str, *names: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "groupVersion": group_version, "resources": [{"name": n} for n in names]}


FULL = [doc("v1", "pods", "pods/eviction", "pods/resize", "nodes", "namespaces"),
        doc("apps/v1", "deployments", "deployments/scale"), doc("policy/v1", "poddisruptionbudgets")]


def test_a_current_cluster_supports_every_action() -> None:
    caps = Capabilities.from_discovery(FULL)
    assert all(caps.refusal(action) is None for action in REQUIRES)


def test_a_cluster_without_in_place_resize_refuses_only_memory_balloon() -> None:
    old = [doc("v1", "pods", "pods/eviction", "nodes", "namespaces"), *FULL[1:]]
    caps = Capabilities.from_discovery(old)
    refusal = caps.refusal("memory_balloon")
    assert refusal is not None and "pods/resize" in refusal and "memory_balloon" in refusal
    assert [a for a in REQUIRES if caps.refusal(a)] == ["memory_balloon"]


def test_resources_are_told_apart_by_group_version() -> None:
    # a "deployments/scale" in another group does not make apps/v1 scaling supported
    caps = Capabilities.from_discovery([doc("v1", "nodes"), doc("extensions/v1beta1", "deployments/scale")])
    assert caps.missing("scale_out") == ["apps/v1 deployments/scale"]
    assert caps.refusal("taint") is None
    assert caps.refusal("no-such-action") is None


def test_garbage_in_discovery_is_ignored() -> None:
    caps = Capabilities.from_discovery([{"groupVersion": "v1", "resources": ["nodes", {"name": 3}, {"name": "pods"}]},
                                        {"resources": [{"name": "x"}]}])
    assert caps.served == frozenset({"v1 pods"})


def test_the_report_lists_every_action_once_with_what_an_unsupported_one_lacks() -> None:
    old = [doc("v1", "pods", "pods/eviction", "nodes", "namespaces"), *FULL[1:]]
    record = Capabilities.from_discovery(old).report("c1", 1_700_000_000_000, "referee-0")
    assert [u.action for u in record.unsupported] == ["memory_balloon"]
    assert record.unsupported[0].missing == ["v1 pods/resize"]
    assert sorted([*record.supported, "memory_balloon"]) == sorted(REQUIRES)
    assert (record.cluster, record.reporter) == ("c1", "referee-0")
    assert Capabilities.from_discovery(FULL).report("c1", 1_700_000_000_000, "r").unsupported == []
