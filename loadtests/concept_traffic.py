"""Generated failure-risk traffic with known outcomes: labels that agree with the predictions, or contradict them.

One task is scheduled every ``every_s`` seconds; at its SCHEDULE the failure model "says" 0.6
(a tenth of the tasks, the risky ones) or 0.002 per horizon (a risk.v2 task record). When
``agree``, a risky task FAILs within 4 minutes with probability 0.6 and a calm one with 0.002
(the predictions are calibrated and rank well: AUCPR about 0.6 at a failure rate of 6 %);
otherwise a risky task fails with 0.002 and a calm one with 0.06 (the model ranks the wrong tasks
first). Tasks that do not fail keep running (label 0 at every horizon). A ``clock``
task's UPDATE_RUNNING every 10 s moves task-event time on for ``tail_s`` after the last SCHEDULE,
as a live cluster's other events would.
Used by the drift stage's unit and broker tests (concept drift); ``regime_recording`` by the retraining test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contracts.models import FailureRiskV2, FeatureVector, HorizonRisk, TaskEvent

START_MS = 1_764_000_000_000
RISKY, CALM = 0.6, 0.002
HORIZONS_S = (300, 900, 3600)


@dataclass(frozen=True)
class Traffic:
    events: list[TaskEvent]
    risks: list[FailureRiskV2]


def traffic(*, tasks: int, agree: bool, version: str, seed: int, t0_s: float = 0.0, every_s: float = 1.0,
            prefix: str = "t", tail_s: float = 330.0) -> Traffic:
    rng = np.random.default_rng(seed)
    events: list[TaskEvent] = []
    risks: list[FailureRiskV2] = []
    for i in range(tasks):
        task = f"{prefix}{i}"
        at = START_MS + round((t0_s + i * every_s) * 1000)
        risky = rng.random() < 0.1
        p = RISKY if risky else CALM
        fail_p = p if agree else (CALM if risky else RISKY / 10)
        events.append(_event(task, i, at, "SCHEDULE"))
        risks.append(FailureRiskV2(target_kind="task", target=task, node=f"n{i % 8}", ts_ms=at,
                                   horizons=[HorizonRisk(horizon_s=h, probability=p) for h in HORIZONS_S],
                                   model_version=version, input_ts_ms=at))
        if rng.random() < fail_p:
            events.append(_event(task, i, at + int(rng.integers(5_000, 240_000)), "FAIL"))
    end_ms = START_MS + round((t0_s + tasks * every_s + tail_s) * 1000)
    for j, at in enumerate(range(START_MS + round(t0_s * 1000), end_ms, 10_000)):
        events.append(_event(f"{prefix}clock", j, at, "UPDATE_RUNNING"))
    events = [e for e in events if e.ts_ms <= end_ms]
    events.sort(key=lambda e: e.ts_ms)
    return Traffic(events, risks)


def _event(task: str, i: int, ts_ms: int, kind: str) -> TaskEvent:
    return TaskEvent(task_id=task, job_id=f"j{i // 10}", task_index=i % 10, ts_ms=ts_ms, event=kind,  # type: ignore[arg-type]
                     source="synthetic", machine=f"n{i % 8}")


def regime_recording(*, nodes: int, ticks: int, seed: int, start_ms: int = START_MS
                     ) -> tuple[list[FeatureVector], list[dict[str, object]]]:
    """What a short synthetic replay leaves behind: the features stage's windows (computed by ``featurelib``
    as the stage does) and the simulator's ground truth as ``borgctl replay --truth-out`` writes it."""
    from featurelib.node.samples import sample_from_dict
    from featurelib.node.schema import node_feature_schema_hash
    from featurelib.node.windows import features_for_stream
    from simulator import SyntheticCluster

    sim = SyntheticCluster(nodes=nodes, seed=seed, start_ms=start_ms)
    states: list[dict[str, object]] = []
    truth: list[dict[str, object]] = []
    for batch in sim.run(ticks):
        states.extend(batch.nodestate_dicts())
        for record in batch.truth_records():
            truth.append({**record, "seq": batch.tick})
    schema = node_feature_schema_hash()
    windows = sorted(features_for_stream([sample_from_dict(s) for s in states]), key=lambda w: (w.ts_ms, w.node))
    vectors = [FeatureVector(node=w.node, ts_ms=w.ts_ms, window_s=10, schema_hash=schema, values=w.values,
                             valid=w.valid, samples=w.samples, input_ts_ms=w.input_ts_ms) for w in windows]
    return vectors, truth
