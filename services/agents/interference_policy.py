"""Corrective moves: evict a pod whose co-runners push a latency-sensitive pod past its SLO (issue 21).

Pure: (nodes with per-pod load estimates, settings, now) → ``evict`` candidates for the referee; :func:`assess`
also says, per node, why a hot node got no move.

A placement can only guess how hard a new pod will press on the shared resources; once it runs, its
per-pod (cgroup) counters show it. This rule acts on that after-start knowledge:

* **input** per running pod (:class:`PodLoad`): its class, whether it is latency-sensitive, its job, its age
  and an *estimate* of the pressure it puts on each shared resource (``llc``, ``membw``, ``core``,
  ``frontend``, 0–1, what per-pod counters measure); per node, the room left for requests;
* **interference model**: the per-class sensitivity of :mod:`simulator.workloads` (the model the regime
  model's training labels come from; a pod's slowdown is set by its worst co-runner, never summed). The
  held-out part of the arena is each pod's own pressure, which this rule only knows through the estimate;
* a node is **hot** when the model, on the estimates, puts a latency-sensitive pod above
  ``slo_slowdown``. On a hot node a pod is a **move candidate** when removing it brings at least one such
  pod back under the SLO (the pod itself counts when it is one of them), it has run at least
  ``min_age_s`` (its counters cover a window), it was not moved before (its replacement would restart its
  work again), its job has another running pod (a PodDisruptionBudget with ``maxUnavailable: 1``), and
  some other schedulable node has room for its requests and would take it without pushing a
  latency-sensitive pod over the SLO (on the same estimates);
* candidates rank by pods relieved, then batch before latency-sensitive (a moved latency-sensitive pod
  restarts all its work), then youngest (least work lost); one per node, the best ``max_per_round``
  nodes first. The result is ``evict`` proposals (agent ``reliability``): the referee's disruption budget,
  cooldown and rate limit decide how many happen. The scheduler places the replacement.

Nothing here reads the truth: what the estimates miss, the rule misses. Live, the estimates are the
``pod-pressure`` stage's (podpressure.v1, from each pod's cgroup counters) joined to the pods the Kubernetes
API lists (:mod:`services.agents.pod_loads`), and the reliability agent runs this rule when
``AGENT_RELIABILITY_INTERFERENCE`` is set (docs/decision_plane.md); offline, the arena's orchestrator drives it
(docs/arena.md, "Moves in the orchestrator").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from contracts.models import AgentName, Evidence, JsonScalar, Proposal, TargetRef
from contracts.topics import Topic
from services.agents.proposals import Candidate, proposal_id
from simulator.workloads import task_slowdowns

AGENT: Final[AgentName] = "reliability"
SOURCE = Topic.PODPRESSURE
"""Evidence topic of the per-pod load estimates."""

Slowdowns = Callable[[Sequence[str], np.ndarray], np.ndarray]
"""(classes, pressures (pods, 4)) → each pod's slowdown from its co-runners."""


@dataclass(frozen=True, slots=True)
class PodLoad:
    """One running pod as its per-pod counters describe it."""

    key: str
    """``<namespace>/<pod>``."""
    job: str
    workload_class: str
    latency_sensitive: bool
    pressure: tuple[float, float, float, float]
    """Estimated pressure on (llc, membw, core, frontend), 0–1."""
    age_s: float
    milli_cpu: int
    memory: int
    slowdown: float | None = None
    """Its own observed slowdown, when measured (e.g. its CPI against its job's other pods, as CPI² does);
    None: the rule predicts it from the estimated pressures."""
    tolerations: tuple[tuple[str, str, str, str], ...] = ()
    """(key, operator, value, effect) of each toleration, as in the pod spec ("" where unset)."""
    cleared: frozenset[str] = frozenset()
    """Keys of co-runners it ran beside without being slowed (:mod:`services.agents.clearance`): none of them is
    what slows it now (read only with ``MoveSettings.attribute``)."""


@dataclass(frozen=True, slots=True)
class NodeLoad:
    name: str
    pods: tuple[PodLoad, ...]
    free_milli_cpu: int
    free_memory: int
    schedulable: bool = True
    taints: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect) of each taint; a pod moves here only when it tolerates every NoSchedule and
    NoExecute one."""


def tolerates(pod: PodLoad, taints: Sequence[tuple[str, str, str]]) -> bool:
    """The pod tolerates every NoSchedule / NoExecute taint (Kubernetes' matching: key, Exists or Equal value,
    effect or any)."""
    for key, value, effect in taints:
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any((t_key == key or (not t_key and op == "Exists")) and (op == "Exists" or t_value == value)
                   and t_effect in ("", effect) for t_key, op, t_value, t_effect in pod.tolerations):
            return False
    return True


@dataclass(frozen=True, slots=True)
class MoveSettings:
    slo_slowdown: float = 1.25
    min_age_s: float = 10.0
    max_per_round: int = 1
    """Proposals per evaluation (the referee's disruption budget caps what is applied)."""
    score: float = 0.8
    """The proposals' score: above the referee's default min score (0.5)."""
    margin: float = 0.0
    """A node is hot only when an estimate puts a latency-sensitive pod above ``slo_slowdown + margin``."""
    batch_only: bool = False
    """Move only pods that are not latency-sensitive (a moved one restarts exposed for all its work)."""
    attribute: bool = False
    """Blame by history: a victim with an observed slowdown is relieved by removing a co-runner only if that
    co-runner is not in its ``cleared`` set, and surely relieved when every co-runner left would be cleared
    (its worst co-runner sets its slowdown). Off: the estimates alone say whose removal relieves whom."""

    def __post_init__(self) -> None:
        if self.slo_slowdown <= 1.0:
            raise ValueError(f"move setting slo_slowdown must be > 1, got {self.slo_slowdown}")
        for name in ("min_age_s", "max_per_round", "margin"):
            if getattr(self, name) < 0:
                raise ValueError(f"move setting {name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"move setting score must be in [0, 1], got {self.score}")


@dataclass(frozen=True, slots=True)
class Move:
    pod: PodLoad
    node: str
    relieved: int
    """Latency-sensitive pods over the SLO (on the estimates) that the move brings back under it."""
    predicted_before: float
    """The worst estimated slowdown of a latency-sensitive pod on the node before the move."""
    targets: int
    """Nodes that could take the pod without pushing a latency-sensitive pod over the SLO."""

    def rank(self) -> tuple[int, bool, float]:
        return self.relieved, not self.pod.latency_sensitive, -self.pod.age_s


def _slowdowns(pods: Sequence[PodLoad], model: Slowdowns) -> np.ndarray:
    pressures = np.array([p.pressure for p in pods], dtype=np.float64).reshape(len(pods), 4)
    return model([p.workload_class for p in pods], pressures)


def _pushes_over(pods: Sequence[PodLoad], s: MoveSettings, model: Slowdowns) -> bool:
    slow = _slowdowns(pods, model)
    return any(p.latency_sensitive and v > s.slo_slowdown for p, v in zip(pods, slow.tolist(), strict=True))


def targets_for(pod: PodLoad, source: str, nodes: Sequence[NodeLoad], s: MoveSettings,
                model: Slowdowns = task_slowdowns) -> int:
    """Nodes other than ``source`` with room for ``pod`` where it pushes no latency-sensitive pod over the SLO."""
    return sum(1 for n in nodes
               if n.name != source and n.schedulable and tolerates(pod, n.taints) and n.free_milli_cpu >= pod.milli_cpu
               and n.free_memory >= pod.memory and not _pushes_over((*n.pods, pod), s, model))


def _relieves(pods: Sequence[PodLoad], victim: int, removed: int, after: float, before: float,
              s: MoveSettings) -> bool:
    """Does removing ``pods[removed]`` bring ``pods[victim]`` back under the SLO? On the estimates (``after``,
    ``before``: its predicted slowdown without and with it), and with ``attribute`` on its history as well."""
    cleared = pods[victim].cleared
    if not s.attribute or pods[victim].slowdown is None:
        return after <= s.slo_slowdown and after < before
    if pods[removed].key in cleared:
        return False  # it ran beside the victim without slowing it: not the cause
    if all(p.key in cleared for m, p in enumerate(pods) if m not in (victim, removed)):
        return True  # only cleared co-runners would remain, none of which slowed it alone
    return after <= s.slo_slowdown and after < before


Verdict = Literal["calm", "move", "no_eligible", "no_relief", "no_target"]
"""What the rule concluded for one node: no latency-sensitive pod over the SLO on the estimates (``calm``, or
fewer than two pods); a move found; hot, but no pod may move (too young, moved before, its job's last pod);
hot, but no single removal brings a slowed pod back under the SLO; hot, but no node takes a pod that would."""


@dataclass(frozen=True, slots=True)
class Assessment:
    moves: list[Move]
    """Every hot node's best move, best first (uncapped: :func:`plan` keeps ``max_per_round``)."""
    verdicts: list[Verdict]
    """Per node, in input order."""
    predicted: list[list[float]]
    """Per node, each pod's slowdown on the estimates (1.0 for a pod alone)."""


def assess(nodes: Sequence[NodeLoad], s: MoveSettings, moved: frozenset[str] = frozenset(),
           model: Slowdowns = task_slowdowns) -> Assessment:
    """The rule on every node (module docstring), with why a hot node got no move."""
    jobs = Counter(p.job for n in nodes for p in n.pods)
    best: list[Move] = []
    verdicts: list[Verdict] = []
    predictions: list[list[float]] = []
    for node in nodes:
        pods = node.pods
        if len(pods) < 2:
            verdicts.append("calm")
            predictions.append([1.0] * len(pods))
            continue
        predicted = _slowdowns(pods, model).tolist()
        predictions.append(predicted)
        # a pod's own observed slowdown, when there is one, says who suffers; the estimates say who causes it
        slow = [p.slowdown if p.slowdown is not None else v for p, v in zip(pods, predicted, strict=True)]
        over = [p.latency_sensitive and v > s.slo_slowdown for p, v in zip(pods, slow, strict=True)]
        if not any(p.latency_sensitive and v > s.slo_slowdown + s.margin for p, v in zip(pods, slow, strict=True)):
            verdicts.append("calm")
            continue
        worst = max(v for v, o in zip(slow, over, strict=True) if o)
        found: Move | None = None
        verdict: Verdict = "no_eligible"
        for k, pod in enumerate(pods):
            if (pod.age_s < s.min_age_s or pod.key in moved or jobs[pod.job] <= 1
                    or (s.batch_only and pod.latency_sensitive)):
                continue
            keep = [j for j in range(len(pods)) if j != k]
            after = _slowdowns([pods[j] for j in keep], model).tolist()
            relieved = int(over[k]) + sum(1 for j, v in zip(keep, after, strict=True)
                                          if over[j] and _relieves(pods, j, k, v, predicted[j], s))
            if relieved == 0:
                if verdict == "no_eligible":
                    verdict = "no_relief"
                continue
            if verdict != "move":
                verdict = "no_target"
            if found is not None and (relieved, not pod.latency_sensitive, -pod.age_s) <= found.rank():
                continue  # cannot beat the node's best so far: spare the target search
            targets = targets_for(pod, node.name, nodes, s, model)
            if targets:
                found = Move(pod, node.name, relieved, worst, targets)
                verdict = "move"
        verdicts.append(verdict)
        if found is not None:
            best.append(found)
    best.sort(key=Move.rank, reverse=True)
    return Assessment(best, verdicts, predictions)


def plan(nodes: Sequence[NodeLoad], s: MoveSettings, moved: frozenset[str] = frozenset(),
         model: Slowdowns = task_slowdowns) -> list[Move]:
    """The moves worth proposing now, best first (module docstring)."""
    return assess(nodes, s, moved, model).moves[: s.max_per_round]


def proposals(moves: Sequence[Move], s: MoveSettings, now_ms: int) -> list[Candidate]:
    """``evict`` proposals for the referee, citing the estimates they rest on."""
    out: list[Candidate] = []
    for m in moves:
        namespace, _, name = m.pod.key.partition("/")
        target = TargetRef(kind="Pod", name=name or namespace, namespace=namespace if name else None)
        payload: dict[str, JsonScalar] = {"node": m.node, "reason": "interference", "relieved": m.relieved}
        evidence = [
            Evidence(topic=SOURCE, key=m.node, field="predicted_slowdown", value=round(m.predicted_before, 4),
                     ts_ms=now_ms),
            Evidence(topic=SOURCE, key=m.pod.key, field="pressure", value=",".join(f"{v:.3f}" for v in m.pod.pressure),
                     ts_ms=now_ms),
        ]
        proposal = Proposal(proposal_id=proposal_id(AGENT, "evict", target, payload, evidence), agent=AGENT,
                            kind="evict", target=target, payload=payload, score=s.score, evidence=evidence,
                            ts_ms=now_ms, input_ts_ms=now_ms)
        out.append(Candidate(proposal=proposal, sources=()))
    return out
