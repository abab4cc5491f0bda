"""Hand-written fast paths of the per-message work, each behind a guard (``contracts.fast.guard``).

* ``contracts.fast.nodestate``: NodeState values validated without building a model (features).
* ``contracts.fast.featurevector``: FeatureVector values to packed rows (regime, anomaly, risk, forecast, drift).
* ``contracts.fast.traceparent``: the W3C ``traceparent`` header parsed and written directly
  (``contracts.headers``, every hop).
* ``services.runtime.trace_fastpath``: stage and producer spans made without ``Tracer.start_span``
  (the runtime's half; it mirrors the OpenTelemetry SDK, which contracts does not import).

Each gives exactly the library's answer and falls back to the library when the release or the
schema it mirrors is not the pinned one. What they save, and the command that measures it:
``docs/performance.md``.
"""
