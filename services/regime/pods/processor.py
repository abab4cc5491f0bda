"""The pod-regime processor: NodeState per-cgroup counters + each pod's job → a RegimeLabelV2 per node window on
podregimes.v1.

Per node, ``featurelib.pod_regime.PodRegimeWindows`` closes the node's 10 s windows (the features stage's panes)
with each pod's ratios read against its own job's pods (``jobs``: the API server's pod list); the pod-relative
model (``services.regime.pod_model``) answers each closed window once per batch, and its rules decide when it
abstains: ``unknown`` with ``counters_missing`` (no pod of the node could be read: no per-cgroup counters, as on a
node without a hardware PMU) or ``low_confidence``. An answered label carries no interference prediction (this
model has no regressors) and no hysteresis (``raw_regime`` = ``regime``); ``changed`` says whether the node's
label differs from the last one this process published for it.

The reference is fleet-wide (a job's pods run on many nodes), so one process must see every node: the stage runs
as one replica (deploy/base/pod-regime). Nothing is persisted: after a restart the job references and open windows
rebuild from the input re-read after the committed offset (a minute of input). A malformed or schema-invalid
NodeState goes to the dead-letter topic (``Sink.dead_letter``: original bytes, bounded) and the stream goes on; so
does a record the window code cannot take (``processing``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from prometheus_client import Counter

from contracts import telemetry as names
from contracts.models import UNKNOWN_REGIME, RegimeLabelV2
from contracts.topics import Topic
from featurelib.pod_regime import PodRegimeWindow, PodRegimeWindows
from services.regime.abstention import reasons_of
from services.regime.pod_model import PodRegimeModel
from services.regime.pods.jobs import PodJobs
from services.regime.pods.settings import PodRegimeSettings
from services.runtime.batch_stream import Batch, BatchStream, decoded_nodestates
from services.runtime.model_watch import ModelWatcher, infer_rows
from services.runtime.stream_io import Sink, headers_of
from services.runtime.stream_settings import app_id
from services.runtime.stream_trace import stage_span

SERVICE = "pod-regime"
IN_TOPIC = Topic.NODESTATE
OUT_TOPIC = Topic.PODREGIMES
log = logging.getLogger(__name__)
RECORDS = Counter("borg_pod_regime_windows_total", "Pod-relative regime labels published by regime", ["regime"])
DROPPED = Counter("borg_pod_regime_dropped_pods_total", "Pods past POD_REGIME_MAX_PODS_PER_NODE in a window")
PODS_READ = Counter("borg_pod_regime_pods_read_total",
                    "Pods read in closed windows, by whether their job had a reference (3+ distinct pods recently)",
                    ["reference"])


def label_of(window: PodRegimeWindow, probs: np.ndarray, mask: int, regimes: Sequence[str], version: str,
             changed: bool, input_ts_ms: int) -> RegimeLabelV2:
    """The record for one window: the top regime, or ``unknown`` with the reasons in ``mask`` (``abstention`` bits).
    ``input_ts_ms``: when the NodeState that closed the window was produced."""
    reasons = reasons_of(mask)
    fields: dict[str, Any] = {"node": window.node, "ts_ms": window.ts_ms, "changed": changed, "interference": {},
                              "model_version": version, "input_ts_ms": input_ts_ms}
    if reasons:
        fields |= {"regime": UNKNOWN_REGIME, "raw_regime": UNKNOWN_REGIME, "confidence": 0.0, "abstain": reasons}
    else:
        best = int(np.argmax(probs))
        fields |= {"regime": regimes[best], "raw_regime": regimes[best], "confidence": float(probs[best])}
    return RegimeLabelV2.model_validate(fields)


class PodRegimeProcessor:
    def __init__(self, settings: PodRegimeSettings, sink: Sink, models: ModelWatcher[PodRegimeModel],
                 jobs: PodJobs) -> None:
        self.settings = settings
        self.sink = sink
        self.models = models
        self.jobs = jobs
        self.group = app_id(SERVICE, settings.topic_prefix)
        self.frames = self._frames_for(models.current)
        self.stream = BatchStream(service=SERVICE, settings=settings, sink=sink, topics=[IN_TOPIC],
                                  handle=self._handle)
        self._last: OrderedDict[str, str] = OrderedDict()
        self.emitted = 0

    def _frames_for(self, model: PodRegimeModel) -> PodRegimeWindows:
        return model.windows(self.jobs.job_of, max_nodes=self.settings.max_nodes,
                             max_pods=self.settings.max_pods_per_node)

    def current_frames(self) -> tuple[PodRegimeModel, PodRegimeWindows]:
        """The model now served and its row builder: rebuilt when a new model reads pods over another span."""
        model = self.models.current
        if model.span_windows != self.frames.span_windows:
            # other rows: the open windows and the job references start again (about a minute of input)
            log.warning("model %s reads pods over %d windows (was %d): pod windows rebuilt", model.version,
                        model.span_windows, self.frames.span_windows)
            self.frames = self._frames_for(model)
        return model, self.frames

    async def _handle(self, batch: Batch) -> None:
        model, frames = self.current_frames()  # one model per batch: its rows are built over its span
        closed: list[tuple[Any, PodRegimeWindow]] = []
        async for event, state in decoded_nodestates(batch, self.sink):
            dropped = frames.dropped_pods
            try:
                windows = frames.observe(state)
            except (ValueError, KeyError, TypeError, OverflowError) as exc:
                await self.sink.dead_letter(event, f"pod regime windows: {exc}"[:2000], "processing")
                continue
            if frames.dropped_pods > dropped:
                DROPPED.inc(frames.dropped_pods - dropped)
            closed += [(event, w) for w in windows]
        if closed:
            await self.publish(closed, model)

    def _changed(self, node: str, regime: str) -> bool:
        before = self._last.pop(node, None)
        self._last[node] = regime
        while len(self._last) > self.settings.max_nodes:
            self._last.popitem(last=False)
        return before is not None and before != regime

    async def publish(self, closed: Sequence[tuple[Any, PodRegimeWindow]], model: PodRegimeModel) -> None:
        x = np.stack([w.x for _, w in closed])
        results, errors = infer_rows(lambda rows: (model.predict(rows),), x)
        answered = [i for i, r in enumerate(results) if r is not None]
        probs_of = np.zeros((len(closed), len(model.regimes)))
        if answered:  # the batch's rules judged once, as its inference ran once
            probs_of[answered] = np.asarray([results[i][0] for i in answered], dtype=np.float64)  # type: ignore[index]
        masks = model.judge(x, probs_of)[0]
        for i, ((event, window), result) in enumerate(zip(closed, results, strict=True)):
            if result is None:
                await self.sink.dead_letter(event, f"pod regime model: {errors.get(i, 'failed')}"[:2000],
                                            "processing")
                continue
            probs = probs_of[i]
            mask = int(masks[i])
            regime = UNKNOWN_REGIME if mask else model.regimes[int(np.argmax(probs))]
            record = label_of(window, probs, mask, model.regimes, model.version, self._changed(window.node, regime),
                              int(event.message.timestamp))
            attrs: dict[str, Any] = {names.NODE_NAME: window.node, names.MODEL_VERSION: model.version,
                                     "pod_regime.pods": window.pods, "pod_regime.referenced": window.referenced}
            with stage_span(names.SPAN_POD_REGIME_INFER, headers_of(event), topic=event.message.topic,
                            group=self.group, attributes=attrs) as ctx:
                await self.sink.send(OUT_TOPIC, record.node, record, ctx)
            RECORDS.labels(record.regime).inc()
            PODS_READ.labels("yes").inc(window.referenced)
            PODS_READ.labels("no").inc(window.pods - window.referenced)
            self.emitted += 1
