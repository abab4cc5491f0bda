"""The eviction step's preconditions and conflict handling, against a scripted API client.

The real API server's behaviour (a stale UID answered 409, a PDB answered 429) is covered in
tests/integration/test_referee_failures.py; here the order of requests is pinned down.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from contracts.models import Decision, Proposal, TargetRef
from services.referee import patches
from services.referee.actuator import KubeActuator
from services.referee.settings import RefereeSettings

NOW_MS = 1_764_000_000_000
POD = TargetRef(kind="Pod", name="web-1", namespace="ns")
PATH = "/api/v1/namespaces/ns/pods/web-1"


class ScriptedApi:
    """Answers GETs with the next pod version and eviction POSTs with the next scripted status."""

    def __init__(self, pods: list[dict[str, Any]], eviction_statuses: list[int]) -> None:
        self.pods = pods
        self.eviction_statuses = eviction_statuses
        self.requests: list[tuple[str, str, Any]] = []

    async def call_api(self, path: str, method: str, **kw: Any) -> dict[str, Any]:
        self.requests.append((method, path, kw.get("body")))
        if method == "GET" and path == PATH:
            return self.pods.pop(0) if len(self.pods) > 1 else self.pods[0]
        if method == "POST" and path == PATH + "/eviction":
            status = self.eviction_statuses.pop(0)
            if status != 201:
                raise ApiException(status=status, reason="Conflict")
        return {}

    async def close(self) -> None:
        return None


def pod(uid: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "web-1", "namespace": "ns", "uid": uid, "resourceVersion": rv}, "status": {}}


def step(payload: dict[str, Any]) -> tuple[Decision, Proposal]:
    p = Proposal(
        proposal_id="p1", agent="admission", kind="evict", target=POD, payload=payload, score=0.9, ts_ms=NOW_MS
    )
    d = Decision(
        decision_id="d1",
        ts_ms=NOW_MS,
        target=POD,
        action="evict",
        chosen_proposal_id="p1",
        reason="test",
        proposals=[p],
        mode="apply",
    )
    return d, p


def run(api: ScriptedApi, payload: dict[str, Any]) -> tuple[str, int | None]:
    s = RefereeSettings(KAFKA_BOOTSTRAP="127.0.0.1:1", mode="apply", conflict_retries=2)
    actuator = KubeActuator(api, s, instance="test")  # type: ignore[arg-type]
    decision, proposal = step(payload)
    result = asyncio.run(actuator.execute(decision, proposal, dry_run=False))
    return result.outcome, result.api_status


def evictions(api: ScriptedApi) -> list[Any]:
    return [body for method, path, body in api.requests if method == "POST" and path.endswith("/eviction")]


def test_the_eviction_carries_the_uid_and_the_resource_version_it_was_decided_on() -> None:
    body = patches.eviction_body(POD, "u1", "42")
    assert body["deleteOptions"] == {"preconditions": {"uid": "u1", "resourceVersion": "42"}}
    assert "deleteOptions" not in patches.eviction_body(POD, None, None)
    assert patches.eviction_body(POD, "u1")["deleteOptions"] == {"preconditions": {"uid": "u1"}}


def test_a_pod_changed_since_it_was_read_is_read_again_and_evicted() -> None:
    api = ScriptedApi([pod("u1", "41"), pod("u1", "42")], [409, 201])
    assert run(api, {}) == ("applied", 200)
    sent = [b["deleteOptions"]["preconditions"] for b in evictions(api)]
    assert sent == [{"uid": "u1", "resourceVersion": "41"}, {"uid": "u1", "resourceVersion": "42"}]


def test_a_different_pod_under_the_same_name_fails_at_once_without_retries() -> None:
    api = ScriptedApi([pod("u-new", "7")], [409, 201])
    assert run(api, {"pod_uid": "u-old"}) == ("failed", 409)
    assert len(evictions(api)) == 1


def test_conflicts_past_the_retry_budget_fail_with_the_api_status() -> None:
    api = ScriptedApi([pod("u1", "1"), pod("u1", "2"), pod("u1", "3")], [409, 409, 409])
    assert run(api, {}) == ("failed", 409)
    assert len(evictions(api)) == 3  # conflict_retries=2: the first try and two more
