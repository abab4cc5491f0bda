"""Leader election for the referee on a ``coordination.k8s.io/v1`` Lease (the rules: ``lease_rules``).

Only the leader joins the proposals consumer group and writes to the cluster: the cluster-wide
rate limit and disruption budget are one process's memory (restored from the state changelog,
``services.referee.durable``), so two active referees would each spend a full budget. Writes use
the Lease's ``resourceVersion``: of two candidates taking an expired lease at once, one gets 409
Conflict and stays standby.

A leader that cannot renew for ``renew_deadline_s`` gives up (``lost`` is set) before its lease
can expire for the others (``renew_deadline_s < lease_duration_s``), so two leaders never act at
once as long as the clocks *run* at the same rate (they need not agree). On a clean stop the
leader releases the lease (empty holder) so the standby takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp

from services.referee.lease_rules import LeaseRecord, Observation, next_step, transitions_after
from services.runtime.pause import pause

log = logging.getLogger(__name__)
Obj = dict[str, Any]
KubeCall = Callable[[str, str, Obj | None], Awaitable[Obj]]
"""(method, path, JSON body) → the JSON answer; an API error raises ``KubeCallError`` (the actuator
module, the referee's one Kubernetes client module, makes it: ``actuator.kube_call``)."""


class KubeCallError(Exception):
    """An API server answer other than 2xx."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


def _micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_of(lease: Obj) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        duration_s=int(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        renew_time=spec.get("renewTime"),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
    )


class LeaseElector:
    """Campaign for one Lease until stopped; ``leading`` is set while this process holds it."""

    def __init__(self, call: KubeCall, *, name: str, namespace: str, identity: str, lease_duration_s: int,
                 renew_deadline_s: float, retry_period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._call = call
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self.observation = Observation()
        self._renewed_at = 0.0
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def _spec(self, record: LeaseRecord | None, acquire: bool) -> Obj:
        now = _micro_time(datetime.now(UTC))
        spec: Obj = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                     "renewTime": now, "leaseTransitions": transitions_after(record, self.identity)}
        if acquire:
            spec["acquireTime"] = now
        return spec

    async def try_once(self) -> bool:
        """Read the lease and create, take or renew it when the rules say so; True when this process holds it."""
        try:
            lease: Obj | None = await self._call("GET", f"{self._path}/{self.name}", None)
        except KubeCallError as exc:
            if exc.status != 404:
                raise
            lease = None
        record = record_of(lease) if lease is not None else None
        now = self.clock()
        self.observation.see(record, now)
        step = next_step(self.observation, self.identity, now)
        if step == "wait":
            return False
        if step == "create":
            body: Obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": self.name, "namespace": self.namespace},
                         "spec": self._spec(None, acquire=True)}
            written = await self._call("POST", self._path, body)
        else:
            assert lease is not None
            spec = {**(lease.get("spec") or {}), **self._spec(record, acquire=step == "acquire")}
            body = {**lease, "spec": spec}  # metadata.resourceVersion: a concurrent writer gets 409
            written = await self._call("PUT", f"{self._path}/{self.name}", body)
        self.observation.see(record_of(written), self.clock())
        if step != "renew":
            log.info("leader election: %s now holds lease %s/%s (%s)", self.identity, self.namespace, self.name, step)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign until ``stop``; once leading, set ``lost`` (and return) when renewing fails too long."""
        try:
            while not stop.is_set():
                try:
                    held = await self.try_once()
                except KubeCallError as exc:
                    held = False
                    if exc.status != 409:  # 409: another candidate wrote first, the normal race
                        log.warning("leader election: lease %s/%s: %s %s", self.namespace, self.name, exc.status,
                                    exc.reason)
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    held = False
                    log.warning("leader election: API server unreachable: %s", exc)
                now = self.clock()
                if held:
                    self._renewed_at = now
                    self.leading.set()
                elif self.leading.is_set() and (now - self._renewed_at >= self.renew_deadline_s
                                                or self._taken_over()):
                    log.error("leader election: lost lease %s/%s (not renewed for %.1fs)", self.namespace,
                              self.name, now - self._renewed_at)
                    self.leading.clear()
                    self.lost.set()
                    return
                await pause(stop, self.retry_period_s)
        finally:
            if self.leading.is_set() and not self.lost.is_set():
                await self.release()

    def _taken_over(self) -> bool:
        record = self.observation.record
        return record is not None and record.holder is not None and record.holder != self.identity

    async def release(self) -> None:
        """Give the lease up (empty holder) so a standby takes it without waiting for it to expire."""
        try:
            lease = await self._call("GET", f"{self._path}/{self.name}", None)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1,
                    "renewTime": _micro_time(datetime.now(UTC))}
            await self._call("PUT", f"{self._path}/{self.name}", {**lease, "spec": spec})
            log.info("leader election: %s released lease %s/%s", self.identity, self.namespace, self.name)
        except (KubeCallError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("leader election: releasing lease %s/%s failed: %s", self.namespace, self.name, exc)
        finally:
            self.leading.clear()
