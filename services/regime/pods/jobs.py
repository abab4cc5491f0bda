"""Each pod's job, from the API server's pod list (I/O around a pure table).

Every ``POD_REGIME_PODS_REFRESH_S`` the bound pods of every namespace are listed (paginated JSON, no model classes)
and each UID gets its job (``services.runtime.pod_jobs.job_of``: the job label when ``POD_REGIME_JOB_LABEL`` names
one, else the controller). A pod no longer listed keeps its job for ``POD_REGIME_JOB_GRACE_S``: its last window
closes after it is gone. A list that fails keeps the table and is logged; until the first list succeeds every pod
is read without a job (no reference: the model sees only the node and abstains more). Needs ``list`` on pods
(deploy/base/pod-regime).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes_asyncio import client
from prometheus_client import Gauge

from services.runtime.kube_client import list_objects, relist_until_stopped
from services.runtime.pod_jobs import job_of

BOUND = [("fieldSelector", "spec.nodeName!=")]
JOBS_KNOWN = Gauge("borg_pod_regime_jobs_known", "Pods whose job the pod lists named (grace included)")


class PodJobs:
    """pod UID → ``<namespace>/<job>``; ``update`` is pure (the clock is passed in)."""

    def __init__(self, job_label: str | None, grace_s: float) -> None:
        self.job_label = job_label
        self.grace_s = grace_s
        self._jobs: dict[str, tuple[str, float]] = {}
        self.listed_at: float | None = None

    def job_of(self, uid: str) -> str | None:
        entry = self._jobs.get(uid)
        return entry[0] if entry is not None else None

    def __len__(self) -> int:
        return len(self._jobs)

    def update(self, pods: Iterable[Mapping[str, Any]], now: float) -> None:
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = meta.get("uid")
            if isinstance(uid, str) and uid:
                self._jobs[uid] = (job_of(meta, self.job_label), now)
        cutoff = now - self.grace_s
        self._jobs = {uid: entry for uid, entry in self._jobs.items() if entry[1] >= cutoff}
        self.listed_at = now
        JOBS_KNOWN.set(len(self._jobs))

    async def follow(self, api: client.ApiClient, refresh_s: float, stop: asyncio.Event,
                     clock: Callable[[], float] = time.monotonic) -> None:
        """List pods into the table until ``stop`` is set (then closes ``api``)."""

        async def refresh(api: client.ApiClient) -> str:
            pods, _ = await list_objects(api, "/api/v1/pods", BOUND)
            self.update(pods, clock())
            return f"{len(self)} jobs known"

        await relist_until_stopped(api, stop, refresh_s, refresh, what="listing pods",
                                   on_failure="pods keep the jobs last listed")
