"""The referee refuses a memory balloon the API server would refuse (upstream's resize rules), with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from services.referee import patches


def pod(*, running: bool = True, resources: bool = True, qos: str = "Burstable", **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"qosClass": qos}
    if running:
        cs: dict[str, Any] = {"name": "app", "state": {"running": {"startedAt": "2026-11-27T00:00:00Z"}}}
        if resources:
            cs["resources"] = {"requests": {"memory": "256Mi"}}
        status["containerStatuses"] = [cs]
    return {
        "metadata": {"name": "p", "annotations": extra.pop("annotations", {})},
        "spec": {"nodeName": "n1", **extra.pop("spec", {})},
        "status": status,
    }


def test_a_running_pod_whose_node_reports_resources_may_be_resized() -> None:
    assert patches.resize_refusal(pod()) is None


def test_a_pod_not_running_yet_may_be_resized() -> None:
    # the API cannot tell whether the node supports resize, so it assumes it does (and so do we)
    assert patches.resize_refusal(pod(running=False)) is None


def test_a_running_pod_on_a_kubelet_without_in_place_resize_is_refused() -> None:
    reason = patches.resize_refusal(pod(resources=False))
    assert reason is not None and reason.startswith("node n1 does not support in-place resize")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"annotations": {"kubernetes.io/config.mirror": "abc"}}, "static (mirror) pods cannot be resized"),
        ({"spec": {"os": {"name": "windows"}}}, "Windows pods cannot be resized in place"),
        ({"qos": "Guaranteed"}, "the pod is Guaranteed: changing its memory request alone would change its QoS class"),
    ],
)
def test_pods_the_api_never_resizes_are_refused(kwargs: dict[str, Any], expected: str) -> None:
    assert patches.resize_refusal(pod(**kwargs)) == expected


def test_a_request_above_the_container_limit_is_refused() -> None:
    spec = {
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "300Mi"}}}
            ]
        }
    }
    assert patches.resize_body(spec, 512) == (
        None,
        "the new memory request of container app would exceed its limit 300Mi",
    )
    body, _ = patches.resize_body(spec, 128)
    assert body == {"spec": {"containers": [{"name": "app", "resources": {"requests": {"memory": "128Mi"}}}]}}
