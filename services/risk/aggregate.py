"""Node risk from task risk: P(at least one running task on the node fails within h).

    p_node(h) = 1 - prod_i (1 - p_i(h))        over the node's running tasks i

This treats task failures as independent given their predicted probabilities. It is the
quantity an operator acting on a node cares about ("will anything here fail soon"); it
grows with the number of tasks, so agents compare it against a threshold that allows for
that (``FailureRisk.tasks`` says how many tasks were aggregated). The maximum task
probability is a lower bound of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def node_probability(task_probabilities: Iterable[Sequence[float]], horizons: int) -> list[float]:
    survive = [1.0] * horizons
    for probs in task_probabilities:
        for j in range(horizons):
            survive[j] *= 1.0 - min(max(float(probs[j]), 0.0), 1.0)
    return [min(max(1.0 - s, 0.0), 1.0) for s in survive]
