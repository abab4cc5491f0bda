"""Building proposals: evidence from the inputs used, deterministic ids, input timestamps."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from contracts.base import Contract
from contracts.models import (
    UNKNOWN_REGIME,
    AgentName,
    Evidence,
    FailureRiskV2,
    JsonScalar,
    Proposal,
    ProposalKind,
    RegimeLabelV2,
    TargetRef,
)
from services.agents.view import Seen

Cited = tuple[Seen[Contract], str, JsonScalar]  # (input, field, value it had)


@dataclass(frozen=True)
class Candidate:
    """A proposal plus the inputs it was derived from (their span contexts become span links)."""

    proposal: Proposal
    sources: tuple[Seen[Contract], ...]


def fresh(seen: Seen[Contract] | None, now_ms: int, max_age_s: float) -> bool:
    """The input exists and is recent enough to act on (max_age_s == 0: any age)."""
    if seen is None:
        return False
    return max_age_s <= 0 or now_ms - seen.ts_ms <= max_age_s * 1000


def answered(seen: Seen[RegimeLabelV2] | None, now_ms: int, max_age_s: float) -> Seen[RegimeLabelV2] | None:
    """The node's regime label when it is fresh and names a regime; None when missing, stale or ``unknown``.

    ``unknown`` is no information (the model abstained): a policy treats it exactly as a missing label.
    """
    if seen is None or not fresh(seen, now_ms, max_age_s) or seen.value.regime == UNKNOWN_REGIME:
        return None
    return seen


def abstained(seen: Seen[RegimeLabelV2] | None, now_ms: int, max_age_s: float) -> bool:
    """The node's latest fresh label is ``unknown``: the model cannot judge its current window."""
    return seen is not None and fresh(seen, now_ms, max_age_s) and seen.value.regime == UNKNOWN_REGIME


def usable_risk(seen: Seen[FailureRiskV2] | None, now_ms: int, max_age_s: float) -> Seen[FailureRiskV2] | None:
    """The risk when it may be acted on: fresh and computed from inputs inside the model's training range.

    An out-of-range risk is ignored, exactly as a missing one: it never triggers an action, never
    blocks one, and is never cited as evidence.
    """
    if seen is None or not fresh(seen, now_ms, max_age_s) or not seen.value.in_range:
        return None
    return seen


def risk_probability(risk: FailureRiskV2, horizon_s: int | None) -> float:
    """Failure probability at one horizon, or the worst over all horizons."""
    if horizon_s is not None:
        for h in risk.horizons:
            if h.horizon_s == horizon_s:
                return h.probability
    return max(h.probability for h in risk.horizons)


def proposal_id(
    agent: str, kind: str, target: TargetRef, payload: dict[str, JsonScalar], evidence: Sequence[Evidence]
) -> str:
    """Same agent, action, target, payload and evidence → same id (replays are recognisable)."""
    material = orjson.dumps(
        [agent, kind, target.key(), sorted(payload.items()), [e.model_dump(mode="json") for e in evidence]],
        option=orjson.OPT_SORT_KEYS,
    )
    return f"{agent[:3]}-{hashlib.sha256(material).hexdigest()[:24]}"


def propose(
    *,
    agent: AgentName,
    kind: ProposalKind,
    target: TargetRef,
    score: float,
    cited: Sequence[Cited],
    now_ms: int,
    payload: dict[str, JsonScalar] | None = None,
) -> Candidate:
    """A Candidate whose proposal cites every input used, newest input time included."""
    body = dict(payload or {})
    evidence = [
        Evidence(topic=seen.topic, key=seen.key, field=name, value=value, ts_ms=seen.ts_ms)
        for seen, name, value in cited
    ]
    sources = tuple({id(seen): seen for seen, _, _ in cited}.values())
    input_ts = max((s.input_ts_ms for s in sources), default=None)
    proposal = Proposal(
        proposal_id=proposal_id(agent, kind, target, body, evidence),
        agent=agent,
        kind=kind,
        target=target,
        payload=body,
        score=round(min(1.0, max(0.0, score)), 4),
        evidence=evidence,
        ts_ms=now_ms,
        input_ts_ms=input_ts,
    )
    return Candidate(proposal=proposal, sources=sources)


def deployment_ref(namespace: str, name: str) -> TargetRef:
    return TargetRef(kind="Deployment", name=name, namespace=namespace)


def node_ref(name: str) -> TargetRef:
    return TargetRef(kind="Node", name=name)


def pod_ref(task_id: str, namespace: str) -> TargetRef:
    """Kubernetes task ids are "<namespace>/<pod name>" (see the cluster watcher)."""
    name = task_id.split("/", 1)[1] if "/" in task_id else task_id
    return TargetRef(kind="Pod", name=name, namespace=namespace)


def namespace_ref(name: str) -> TargetRef:
    return TargetRef(kind="Namespace", name=name)
