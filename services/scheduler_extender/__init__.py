"""Scheduler extender: kube-scheduler HTTP filter/prioritize by contention regime and predicted interference.

Layers (each importable on its own):

- ``scoring``  — pure rules: one node's inputs → per-class verdict and 0–10 score (no I/O, no clock);
- ``state``    — latest regime / anomaly / node-risk per node with cached score cards (pure, clock passed in);
- ``extender`` — the ``k8s.io/kube-scheduler/extender/v1`` JSON: request bytes → response bytes + explanation;
- ``server``   — aiohttp routes, one span per request, debug endpoints;
- ``reader``   — aiokafka reader of the compacted topics into ``state``;
- ``main``     — ``borgctl serve scheduler-extender``; ``bench`` — ``borgctl bench extender``.
"""
