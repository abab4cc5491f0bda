"""The actuator's API discovery against the real kube-apiserver, and a refusal for what a cluster lacks."""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from contracts.models import Decision, Proposal, TargetRef
from services.referee.actuator import KubeActuator
from services.referee.capabilities import REQUIRES, Capabilities
from services.referee.settings import RefereeSettings
from tests.integration.test_referee_helpers import kube_admin, referee_kubeconfig  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.kube]


async def test_discovery_finds_every_action_and_a_missing_subresource_is_refused_before_any_request(
    referee_kubeconfig: Path,
) -> None:
    s = RefereeSettings(mode="apply", kubeconfig=str(referee_kubeconfig))  # type: ignore[call-arg]
    actuator = await KubeActuator.connect(s)
    try:
        caps = await actuator.capabilities()
        assert caps is not None
        # v1.36.3 serves everything the actuator uses, in-place resize included
        assert {need for needs in REQUIRES.values() for need in needs} <= caps.served
        # the same referee on a cluster without pods/resize (as before Kubernetes 1.33)
        actuator._capabilities = Capabilities(caps.served - {"v1 pods/resize"})
        target = TargetRef(kind="Pod", name=f"p-{uuid.uuid4().hex[:6]}", namespace="default")
        proposal = Proposal(proposal_id="cap-1", agent="efficiency", kind="memory_balloon", target=target,
                            payload={"memory_request_bytes": 64 << 20}, score=0.9, ts_ms=int(time.time() * 1000))
        decision = Decision(decision_id="d-cap-1", ts_ms=proposal.ts_ms, target=target, action="memory_balloon",
                            chosen_proposal_id="cap-1", reason="test", proposals=[proposal], mode="apply")
        result = await actuator.execute(decision, proposal, dry_run=False)
        assert result.outcome == "refused"
        assert "does not support memory_balloon" in result.message and "pods/resize" in result.message
        # refused before touching the pod: the only request was the Event telling operators why
        assert actuator.calls == {("", "events", "create")}, actuator.calls
    finally:
        await actuator.close()
