"""Node contention features: the ONE definition, used by the features service and by training.

Five modules, one job each, all pure (no I/O, no Kafka), in the order data flows:

* :mod:`featurelib.node.counters` — canonical PMU counter names: what a node reports
  (the node agent parses perf spellings into them, the simulator produces them).
* :mod:`featurelib.node.schema` — the feature schema: base metrics, windows, hop, feature
  names and their hash (a model trained on another definition is refused), model input.
* :mod:`featurelib.node.samples` — one NodeState interval → base metrics (:class:`~featurelib.node.samples.Sample`).
* :mod:`featurelib.node.panes` — per-pane count / sum / sum of squares and the window
  features computed from the last 1, 6 and 30 panes.
* :mod:`featurelib.node.windows` — the per-node state machine (dedup, lateness, idempotent
  re-emission, persistence to a key-value store) that turns samples into windows.

Nothing is re-exported here, so importing :mod:`featurelib.node.counters` (the node agent,
the simulator) does not load numpy-heavy modules it does not use.
"""
