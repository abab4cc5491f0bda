"""Who is *not* the antagonist: co-runners a pod ran beside while its observed slowdown stayed low (issue 21).

Pure, stateful across evaluations. In this project's interference model a pod's slowdown is set by its worst
co-runner, never summed. So a co-runner that was present through every window of a stretch in which the pod's
observed slowdown (its IPC against its job's best pod, :class:`simulator.arena.orchestrator.JobCpi`) stayed at
or below ``limit`` cannot, on its own, slow that pod beyond ``limit``: it is **cleared** for that pod. When the
pod is later slowed past its SLO, the cause is among the co-runners that are not cleared — usually the ones that
arrived since. This is the question Google's CPI² answers by correlating a victim's CPI with each co-runner's
CPU use (Zhang et al., EuroSys 2013), asked here of the node's own history of who ran beside whom, which the
pressure estimates cannot see (they are per-pod, and off by 17–34 % on workloads unlike the training ones).

The move rule (:func:`services.agents.interference_policy.plan` with ``MoveSettings.attribute``) reads the
result through ``PodLoad.cleared``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection


class Clearance:
    """Per pod: the co-runners of its last ``window`` observed windows, and those cleared so far."""

    def __init__(self, window: int, limit: float) -> None:
        if window < 1 or limit < 1.0:
            raise ValueError(f"clearance needs window >= 1 and limit >= 1, got {window}, {limit}")
        self.window = window
        self.limit = limit
        self._seen: dict[str, deque[frozenset[str]]] = {}
        self._cleared: dict[str, frozenset[str]] = {}

    def record(self, pod: str, corunners: frozenset[str]) -> None:
        """The co-runners present during one observed window of ``pod`` (the window its IPC sample covers)."""
        self._seen.setdefault(pod, deque(maxlen=self.window)).append(corunners)

    def judge(self, pod: str, slowdown: float | None) -> None:
        """``slowdown``: the pod's observed slowdown over its last ``window`` windows (None: not known). When it
        is at most ``limit`` and every one of those windows was recorded, the co-runners present in all of them
        are cleared. Cleared pods that no longer run beside it are forgotten (a later return is a new stretch)."""
        seen = self._seen.get(pod)
        if not seen:
            return
        current = seen[-1]
        cleared = self._cleared.get(pod, frozenset()) & current
        if slowdown is not None and slowdown <= self.limit and len(seen) == self.window:
            cleared |= frozenset.intersection(*seen)
        self._cleared[pod] = cleared

    def cleared(self, pod: str) -> frozenset[str]:
        return self._cleared.get(pod, frozenset())

    def retain(self, pods: Collection[str]) -> None:
        """Forget every pod not in ``pods`` (those that finished or left)."""
        for gone in [p for p in self._seen if p not in pods]:
            del self._seen[gone]
            self._cleared.pop(gone, None)
