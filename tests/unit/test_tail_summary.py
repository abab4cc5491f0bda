"""`borgctl tail --summary` lines: what an operator copies from them must work with `borgctl trace`."""

from __future__ import annotations

from borgctl.tail import summarize
from contracts import encode
from contracts.models import ActionResult, Decision, Proposal, TargetRef
from services.referee.policy import decision_id

JAEGER = "http://127.0.0.1:16686"


def _decision() -> Decision:
    target = TargetRef(kind="Deployment", name="web", namespace="shop")
    proposal = Proposal(proposal_id="p-1", agent="reliability", kind="scale_out", target=target, score=0.875,
                        ts_ms=1_700_000_000_000)
    return Decision(decision_id=decision_id(target, [proposal]), ts_ms=1_700_000_000_100, target=target,
                    action="scale_out", chosen_proposal_id="p-1", reason="scale_out by reliability chosen",
                    proposals=[proposal], mode="apply", trace_id="0af7651916cd43dd8448eb211c80319c")


def test_decision_line_shows_the_whole_id_borgctl_trace_searches_for() -> None:
    decision = _decision()
    line = summarize("decisions.v1", encode(decision), JAEGER)
    # `borgctl trace <id>` looks the id up as an exact span tag: a shortened id finds nothing
    assert line.split()[:2] == ["DECISION", decision.decision_id]
    assert len(decision.decision_id) > 12
    assert "Deployment/web: scale_out [apply]" in line
    assert "weighed: reliability:scale_out(0.88)" in line
    assert line.endswith(f"{JAEGER}/trace/0af7651916cd43dd8448eb211c80319c")


def test_action_and_dead_letter_lines() -> None:
    decision = _decision()
    result = ActionResult(decision_id=decision.decision_id, ts_ms=1_700_000_000_200, target=decision.target,
                          action="scale_out", outcome="applied", message="replicas 2 → 3", api_status=200)
    line = summarize("actions.v1", encode(result), JAEGER)
    assert line.startswith(f"ACTION   {decision.decision_id} Deployment/web: scale_out → applied (200)")
    assert summarize("x", b"{not json", JAEGER) == "x: <not JSON, 9 bytes>"
