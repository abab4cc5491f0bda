"""The decision log: each Decision joined with its ActionResult by decision_id, newest kept.

Decisions and results travel on different topics, so either may arrive first: a result for an
unknown decision waits (bounded) until its decision shows up. A replayed decision (same id, the id
is deterministic) updates its row instead of adding one. Per target, the latest decision is kept
apart from the bounded log as the orchestrator's *intent* (what it last chose for that target), so
the cluster view can set it beside what Kubernetes reports.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from contracts.models import ActionResult, Decision, Proposal, TargetRef

JsonDict = dict[str, Any]
MAX_EVIDENCE = 6
MAX_TEXT = 600


@dataclass(slots=True)
class Intent:
    """The latest decision on one target and what became of it."""

    decision_id: str
    ts_ms: int
    action: str
    mode: str
    replicas: int | None
    from_replicas: int | None
    outcome: str | None = None
    message: str | None = None

    def view(self) -> JsonDict:
        return {
            "decision_id": self.decision_id,
            "ts": self.ts_ms,
            "action": self.action,
            "mode": self.mode,
            "replicas": self.replicas,
            "from_replicas": self.from_replicas,
            "outcome": self.outcome,
            "message": self.message,
        }


@dataclass(slots=True)
class Entry:
    decision: Decision
    trace_id: str | None
    version: int
    result: ActionResult | None = None
    result_trace_id: str | None = None
    duplicates: int = 0


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def target_view(target: TargetRef) -> JsonDict:
    return {"kind": target.kind, "name": target.name, "namespace": target.namespace, "key": target.key()}


def proposal_view(p: Proposal, chosen_id: str | None) -> JsonDict:
    return {
        "id": p.proposal_id,
        "agent": p.agent,
        "kind": p.kind,
        "target": p.target.key(),
        "score": p.score,
        "payload": p.payload,
        "chosen": p.proposal_id == chosen_id,
        "evidence": [f"{e.topic} {e.key} {e.field}={e.value}" for e in p.evidence[:MAX_EVIDENCE]],
        "evidence_more": max(0, len(p.evidence) - MAX_EVIDENCE),
    }


def result_view(result: ActionResult, trace_id: str | None) -> JsonDict:
    return {
        "outcome": result.outcome,
        "message": result.message[:MAX_TEXT],
        "api_status": result.api_status,
        "ts": result.ts_ms,
        "trace_id": result.trace_id or trace_id,
    }


class DecisionLog:
    def __init__(self, *, capacity: int = 500) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._orphans: OrderedDict[str, tuple[ActionResult, str | None]] = OrderedDict()
        self.intents: dict[str, Intent] = {}  # TargetRef.key() -> latest decision on it
        self.intent_version = 0
        self.total = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, decision_id: str) -> Entry | None:
        return self._entries.get(decision_id)

    @property
    def orphans(self) -> int:
        return len(self._orphans)

    def add_decision(self, decision: Decision, header_trace_id: str | None, version: int) -> None:
        entry = self._entries.get(decision.decision_id)
        if entry is None:
            self.total += 1
            entry = Entry(decision=decision, trace_id=decision.trace_id or header_trace_id, version=version)
            self._entries[decision.decision_id] = entry
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        else:
            entry.decision = decision
            entry.trace_id = decision.trace_id or header_trace_id or entry.trace_id
            entry.version = version
        orphan = self._orphans.pop(decision.decision_id, None)
        if orphan is not None:
            entry.result, entry.result_trace_id = orphan
        self._update_intent(decision, entry.result, version)

    def add_result(self, result: ActionResult, header_trace_id: str | None, version: int) -> None:
        entry = self._entries.get(result.decision_id)
        if entry is None:
            self._orphans[result.decision_id] = (result, header_trace_id)
            while len(self._orphans) > self.capacity:
                self._orphans.popitem(last=False)
            return
        if result.outcome == "duplicate" and entry.result is not None:
            entry.duplicates += 1  # a replay the referee recognised: keep what really happened
        else:
            entry.result, entry.result_trace_id = result, header_trace_id
        entry.version = version
        self._update_intent(entry.decision, entry.result, version)

    def _update_intent(self, decision: Decision, result: ActionResult | None, version: int) -> None:
        key = decision.target.key()
        current = self.intents.get(key)
        if current is not None and current.ts_ms > decision.ts_ms:
            return  # an older decision (replay, reordering) does not replace the newer intent
        chosen = next((p for p in decision.proposals if p.proposal_id == decision.chosen_proposal_id), None)
        payload = chosen.payload if chosen is not None else {}
        intent = Intent(
            decision_id=decision.decision_id,
            ts_ms=decision.ts_ms,
            action=decision.action,
            mode=decision.mode,
            replicas=_int(payload.get("replicas")),
            from_replicas=_int(payload.get("from_replicas")),
        )
        if result is not None and result.outcome != "duplicate":
            intent.outcome, intent.message = result.outcome, result.message[:MAX_TEXT]
        elif current is not None and current.decision_id == decision.decision_id:
            intent.outcome, intent.message = current.outcome, current.message
        self.intents[key] = intent
        self.intent_version = version

    def view(self, entry: Entry) -> JsonDict:
        d = entry.decision
        return {
            "id": d.decision_id,
            "v": entry.version,
            "ts": d.ts_ms,
            "target": target_view(d.target),
            "action": d.action,
            "chosen": d.chosen_proposal_id,
            "reason": d.reason[:MAX_TEXT],
            "mode": d.mode,
            "trace_id": entry.trace_id or (entry.result.trace_id if entry.result else None) or entry.result_trace_id,
            "proposals": [proposal_view(p, d.chosen_proposal_id) for p in d.proposals],
            "result": result_view(entry.result, entry.result_trace_id) if entry.result else None,
            "duplicates": entry.duplicates,
        }

    def rows(self, since: int | None = None, limit: int | None = None) -> list[JsonDict]:
        """Newest first (by decision time); only rows changed after version `since` when given."""
        changed = [e for e in self._entries.values() if since is None or e.version > since]
        changed.sort(key=lambda e: e.decision.ts_ms, reverse=True)
        if limit is not None:
            changed = changed[:limit]
        return [self.view(e) for e in changed]
