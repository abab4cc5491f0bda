"""Seeded synthetic cluster: PMU counters of co-located workloads under known contention regimes.

README
======

Quick start::

    from simulator import SyntheticCluster, holdout_split

    train_kinds, test_kinds = holdout_split(per_class=1, seed=7)   # held-out workload kinds
    sim = SyntheticCluster(nodes=64, seed=1, workloads=train_kinds, anomaly_rate=0.002)
    for batch in sim.run(600):                 # 600 intervals of 1 s
        X = batch.values                       # (nodes, len(EVENTS)) counts, NaN = not supported
        y = batch.regime                       # index into contracts.models.REGIMES
        states = batch.nodestate_dicts()       # what the node agent publishes (NodeState-shaped)
        truth = batch.truth_records()          # ground truth: NEVER part of the NodeState stream

Model
-----
* Every node is a Sapphire-Rapids-like SKU (32/48/56 cores, 2.0–2.1 GHz base, 250–300 GB/s
  DRAM) running 1–4 co-located workloads. Co-runners change every ``epoch_ticks`` intervals.
* Workload kinds (``KINDS``) belong to the classes in ``contracts.models.WORKLOAD_CLASSES``;
  each class has four kinds, so models can be evaluated on kinds they never saw
  (``holdout_split``). A kind has a solo profile (IPC, LLC accesses and miss ratio, branch
  and miss rates, stall fractions, cores, memory) and a pressure vector on the resources
  ``llc``, ``membw``, ``core``, ``frontend``, scaled by its intensity.
* Each epoch first draws a target regime (``regime_weights``, default uniform over
  ``contracts.models.REGIMES``) and then co-runners that produce it: aggressors whose
  dominant pressure crosses ``REGIME_THRESHOLD`` and gentle co-runners below
  ``GENTLE_LIMIT``. The label is then *recomputed from the pressures* (``regime_of``): a
  resource is contended when the worst co-runner's pressure reaches the threshold;
  ``core`` and ``frontend`` both mean the ``core`` regime; two contended regimes = ``mixed``.
* Interference is conservative (``simulator.workloads``): the slowdown of class ``c`` is
  the **max over co-runners** of ``1 + SENSITIVITY[c] · excess(pressure_j)``, never a sum over
  co-runners. Ground-truth ``slowdown`` is what a new workload of each class would see.
* Counters follow from it: instructions = cycles × IPC / slowdown, LLC miss ratio rises with
  co-runners' LLC pressure, backend stalls absorb the slowdown, frontend stalls and branch
  misses rise with core/frontend pressure, ``mem-bandwidth-bytes`` = LLC misses × 64 × 1.3
  (capped at the SKU's bandwidth). Software counters: ``task-clock`` (ns), ``context-switches``,
  ``cpu-migrations``, ``page-faults``. Names are canonical (``EVENTS``).
* Realism knobs: per-node missing events (``missing_event_prob``: no generic stall events,
  no uncore bandwidth, or no LLC events → status ``not_supported``, value absent), multiplexed
  nodes (``multiplex_prob``: raw count over a running fraction, scaled value with estimation
  noise), multiplicative noise, AR(1) load, CPU frequency falling with utilisation
  (``cpu_freq_mhz`` — a confound, excluded from regime features).
* Anomalies (``anomaly_rate`` per node and interval, ``ANOMALY_KINDS``: cpu_hog, memory_leak,
  counter_glitch, thrashing, hang) last ``anomaly_ticks`` intervals and are labelled in
  ``TickBatch.anomaly`` / ``truth_records()["anomaly"]``, independently of the regime label.

Determinism: everything is drawn from one ``numpy.random.Generator`` seeded with ``seed``;
the same arguments give bit-identical batches. Speed: counters are computed per epoch and
per tick vectorised over nodes (hundreds of thousands of node-samples/s for the arrays;
``nodestate_dicts`` is the per-node part).
"""

from simulator.cluster import (
    ANOMALY_KINDS,
    COUNTED,
    EVENTS,
    MULTIPLEXED,
    NOT_SUPPORTED,
    NodeSpec,
    SyntheticCluster,
    TickBatch,
)
from simulator.workloads import (
    KINDS,
    KINDS_BY_CLASS,
    REGIME_THRESHOLD,
    RESOURCES,
    SENSITIVITY,
    WorkloadKind,
    class_slowdowns,
    holdout_split,
    regime_of,
)

__all__ = [
    "ANOMALY_KINDS",
    "COUNTED",
    "EVENTS",
    "KINDS",
    "KINDS_BY_CLASS",
    "MULTIPLEXED",
    "NOT_SUPPORTED",
    "REGIME_THRESHOLD",
    "RESOURCES",
    "SENSITIVITY",
    "NodeSpec",
    "SyntheticCluster",
    "TickBatch",
    "WorkloadKind",
    "class_slowdowns",
    "holdout_split",
    "regime_of",
]
