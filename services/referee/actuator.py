"""Applying a Decision to Kubernetes: the referee's only kubernetes_asyncio importer.

Every action reads the live object first: when its ``borg-orchestrator.io/decision-id``
annotation already carries this decision, nothing is written (outcome ``duplicate``).
Writes go through the scale subresource, node patches (with resourceVersion
preconditions, retried on 409), the Eviction API (with a UID precondition), the
pods/resize subresource and metadata patches; ``dry_run`` adds ``dryRun=All`` to
each write. API errors become outcomes (429 → refused, anything else → failed, with
the API's status); nothing here raises to the caller. Each outcome but ``duplicate``
is also recorded as a Kubernetes Event on the target.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from opentelemetry import trace

from contracts import telemetry as names
from contracts.models import ActionResult, Decision, JsonScalar, Proposal, TargetRef
from services.referee import budgets, patches
from services.referee.capabilities import DISCOVERY_PATHS, REQUIRES, Capabilities
from services.referee.lease import KubeCall, KubeCallError
from services.referee.settings import RefereeSettings
from services.runtime.kube_client import api_client

log = logging.getLogger(__name__)
tracer = trace.get_tracer("borg.referee")
Obj = dict[str, Any]
Rbac = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb): what the ClusterRole must grant
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Outcome:
    outcome: str
    message: str
    api_status: int | None = None
    api_response: dict[str, JsonScalar] | None = None
    involved: Obj | None = None  # the object, for the Event's involvedObject


@dataclass(frozen=True)
class Step:
    decision: Decision
    proposal: Proposal
    dry_run: bool

    @property
    def target(self) -> TargetRef:
        return self.decision.target

    def payload_int(self, key: str) -> int | None:
        value = self.proposal.payload.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def kube_call(api: client.ApiClient, timeout_s: float) -> KubeCall:
    """A plain JSON request function over ``api`` (the Lease election's client), API errors as ``KubeCallError``."""

    async def call(method: str, path: str, body: Obj | None) -> Obj:
        try:
            result: Obj = await api.call_api(
                path, method, header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body, response_types_map={200: "object", 201: "object"}, auth_settings=["BearerToken"],
                _return_http_data_only=True, _request_timeout=timeout_s)
        except ApiException as exc:
            raise KubeCallError(int(exc.status or 0), str(exc.reason or "")) from exc
        return result or {}

    return call


def _status_body(exc: ApiException) -> dict[str, JsonScalar]:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {"message": str(exc.body)[:500]}
    return {
        "code": int(exc.status or 0),
        "reason": str(body.get("reason") or exc.reason or ""),
        "message": str(body.get("message") or "")[:1000],
    }


class KubeActuator:
    def __init__(self, api: client.ApiClient, settings: RefereeSettings, instance: str | None = None) -> None:
        self.api = api
        self.s = settings
        self.instance = instance or socket.gethostname()
        self.calls: set[Rbac] = set()
        self._capabilities: Capabilities | None = None
        self._capabilities_at = 0.0
        self._handlers: dict[str, Callable[[Step], Awaitable[Outcome]]] = {
            "scale_out": self._scale,
            "replicate": self._scale,
            "scale_in": self._scale,
            "throttle": self._scale,
            "deprioritize": self._deprioritize,
            "taint": self._node,
            "cordon": self._node,
            "consolidate": self._node,
            "evict": self._evict,
            "memory_balloon": self._balloon,
            "hold_admission": self._hold,
        }

    @classmethod
    async def connect(cls, settings: RefereeSettings) -> KubeActuator:
        return cls(await api_client(settings.kubeconfig), settings)

    async def close(self) -> None:
        await self.api.close()

    async def raw(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Obj:
        """One API request outside any decision (tools: the benchmark's set-up). Not counted in `calls`."""
        headers = {"Accept": "application/json", **({"Content-Type": content_type} if content_type else {})}
        result: Obj = await self.api.call_api(
            path,
            method,
            header_params=headers,
            body=body,
            response_types_map={200: "object", 201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=self.s.request_timeout_s,
        )
        return result or {}

    # ------------------------------------------------------------------ entry point

    async def capabilities(self) -> Capabilities | None:
        """What the API serves (API discovery, read again every ``capabilities_refresh_s``); None while unknown.

        Discovery is readable by every authenticated client (``system:discovery``), so it needs no RBAC rule
        and is not counted in ``calls``. When it cannot be read the last answer stands (or None: nothing is
        refused for it, the write itself decides).
        """
        now = time.monotonic()
        if self._capabilities is not None and now - self._capabilities_at < self.s.capabilities_refresh_s:
            return self._capabilities
        documents = []
        try:
            for path in DISCOVERY_PATHS:
                try:
                    documents.append(await self.api.call_api(
                        path, "GET", header_params={"Accept": "application/json"},
                        response_types_map={200: "object"}, auth_settings=["BearerToken"],
                        _return_http_data_only=True, _request_timeout=self.s.request_timeout_s))
                except ApiException as exc:
                    if exc.status != 404:  # a group the server does not serve at all: absent
                        raise
        except (ApiException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("API discovery failed (%s): keeping the previous capabilities", exc)
            self._capabilities_at = now - self.s.capabilities_refresh_s + 10.0  # try again in 10 s
            return self._capabilities
        docs = [doc for doc in documents if isinstance(doc, dict)]
        if not any(doc.get("groupVersion") == "v1" and doc.get("kind") == "APIResourceList" for doc in docs):
            # not discovery (an API server always serves the core group): no basis to refuse anything
            log.warning("API discovery answered no core APIResourceList: capabilities unknown")
            self._capabilities_at = now
            return self._capabilities
        found = Capabilities.from_discovery(docs)
        if found != self._capabilities:
            lacking = sorted({need for needs in REQUIRES.values() for need in needs} - found.served)
            log.info("API discovery: %s", f"not served: {', '.join(lacking)}" if lacking else "every action supported")
        self._capabilities, self._capabilities_at = found, now
        return found

    async def execute(self, decision: Decision, proposal: Proposal, *, dry_run: bool) -> ActionResult:
        """Apply (or server-side dry-run) the chosen proposal; never raises."""
        step = Step(decision, proposal, dry_run)
        handler = self._handlers.get(decision.action)
        try:
            caps = await self.capabilities()
            refusal = caps.refusal(decision.action) if caps is not None else None
            if handler is None:
                result = Outcome("refused", f"no actuator for action {decision.action!r}")
            elif refusal is not None:
                result = Outcome("refused", refusal)
            else:
                result = await handler(step)
        except ApiException as exc:
            status = _status_body(exc)
            verdict = "refused" if exc.status == 429 else "failed"
            result = Outcome(verdict, f"API {exc.status} {status['reason']}: {status['message']}", exc.status, status)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            result = Outcome("failed", f"Kubernetes API unreachable: {type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug must not take the referee down: report it as a failed action
            log.exception("actuator error on %s", decision.decision_id)
            result = Outcome("failed", f"actuator error: {type(exc).__name__}: {exc}")
        now_ms = int(time.time() * 1000)
        if result.outcome != "duplicate":
            await self._event(step, result, now_ms)
        return ActionResult(
            decision_id=decision.decision_id,
            ts_ms=now_ms,
            target=decision.target,
            action=decision.action,
            outcome=result.outcome,  # type: ignore[arg-type]
            message=result.message,
            api_status=result.api_status,
            api_response=result.api_response,
            trace_id=decision.trace_id,
        )

    # ------------------------------------------------------------------ HTTP

    async def _call(
        self,
        method: str,
        path: str,
        rbac: Rbac,
        *,
        body: Any = None,
        content_type: str | None = None,
        dry_run: bool = False,
        manager: bool = True,
    ) -> Obj:
        self.calls.add(rbac)
        query: list[tuple[str, str]] = []
        if dry_run:
            query.append(("dryRun", "All"))
        if manager and method in ("PATCH", "PUT", "POST"):
            query.append(("fieldManager", self.s.field_manager))
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        request = self.api.call_api(
            path,
            method,
            query_params=query,
            header_params=headers,
            body=body,
            response_types_map={200: "object", 201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=self.s.request_timeout_s,
        )
        if method == "GET":
            result: Obj = await request
            return result or {}
        with tracer.start_as_current_span(names.SPAN_K8S_WRITE) as span:
            span.set_attribute(names.K8S_VERB, rbac[2])
            span.set_attribute(names.K8S_RESOURCE, rbac[1])
            span.set_attribute(names.K8S_OBJECT, path.rsplit("/", 1)[-1] if "/eviction" not in path else path)
            try:
                result = await request
            except ApiException as exc:
                span.set_attribute(names.K8S_STATUS_CODE, int(exc.status or 0))
                raise
            span.set_attribute(names.K8S_STATUS_CODE, 201 if method == "POST" else 200)
            return result or {}

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _involved(obj: Obj, kind: str, api_version: str) -> Obj:
        meta = obj.get("metadata") or {}
        out: Obj = {"kind": kind, "apiVersion": api_version, "name": meta.get("name")}
        if meta.get("namespace"):
            out["namespace"] = meta["namespace"]
        if meta.get("uid"):
            out["uid"] = meta["uid"]
        if meta.get("resourceVersion"):
            out["resourceVersion"] = meta["resourceVersion"]
        return out

    @staticmethod
    def _duplicate(step: Step, obj: Obj, involved: Obj) -> Outcome | None:
        if patches.annotations_of(obj).get(budgets.ANN_DECISION) == step.decision.decision_id:
            return Outcome(
                "duplicate",
                f"{step.target.key()} already carries decision {step.decision.decision_id}",
                involved=involved,
            )
        return None

    def _done(self, step: Step, message: str, response: dict[str, JsonScalar], involved: Obj) -> Outcome:
        if step.dry_run:
            return Outcome(
                "dry-run", "server accepted (dry run, nothing persisted): " + message, 200, response, involved
            )
        return Outcome("applied", message, 200, response, involved)

    async def _pdbs(self, namespace: str) -> list[Obj]:
        body = await self._call(
            "GET",
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
            ("policy", "poddisruptionbudgets", "list"),
        )
        return list(body.get("items") or [])

    async def _read_then_write(
        self,
        step: Step,
        path: str,
        read: Rbac,
        kind: str,
        api_version: str,
        write: Callable[[Obj, Obj], Awaitable[Outcome]],
        retryable: Callable[[Obj], bool] = lambda obj: True,
    ) -> Outcome:
        """GET the target, then `write(obj, involved)`; a 409 re-reads and writes again.

        The writes carry the read's resourceVersion, so a conflict means the object changed in
        between; up to `conflict_retries` more attempts, unless `retryable(obj)` says no.
        """
        attempts = self.s.conflict_retries + 1
        for attempt in range(1, attempts + 1):
            obj = await self._call("GET", path, read)
            involved = self._involved(obj, kind, api_version)
            if dup := self._duplicate(step, obj, involved):
                return dup
            try:
                return await write(obj, involved)
            except ApiException as exc:
                if exc.status != 409 or attempt == attempts or not retryable(obj):
                    raise
                log.info("409 on %s, re-reading (attempt %d)", path, attempt)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ Deployments

    def _deployment_path(self, t: TargetRef) -> str:
        return f"/apis/apps/v1/namespaces/{t.namespace}/deployments/{t.name}"

    async def _scale(self, step: Step) -> Outcome:
        path = self._deployment_path(step.target)
        dep = await self._call("GET", path, ("apps", "deployments", "get"))
        involved = self._involved(dep, "Deployment", "apps/v1")
        if dup := self._duplicate(step, dep, involved):
            return dup
        requested = step.payload_int("replicas")
        if requested is None:
            return Outcome("refused", "proposal carries no integer payload 'replicas'", involved=involved)
        current = int((dep.get("spec") or {}).get("replicas", 1))
        lo, hi = budgets.replica_bounds(patches.annotations_of(dep), self.s.min_replicas, self.s.max_replicas)
        replicas, note = budgets.clamp_replicas(requested, lo, hi)
        note = f" ({note})" if note else ""
        if replicas == current:
            return Outcome("refused", f"no change: already at {current} replicas{note}", involved=involved)
        if replicas < current:
            labels = (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
            blocked = budgets.scale_blocked(await self._pdbs(str(step.target.namespace)), labels, replicas)
            if blocked:
                return Outcome("refused", f"disruption budget: {blocked}", involved=involved)
        scale = await self._call(
            "PATCH",
            path + "/scale",
            ("apps", "deployments/scale", "patch"),
            body={"spec": {"replicas": replicas}},
            content_type=MERGE,
            dry_run=step.dry_run,
        )
        await self._call(
            "PATCH",
            path,
            ("apps", "deployments", "patch"),
            body=patches.metadata_patch(step.decision),
            content_type=MERGE,
            dry_run=step.dry_run,
        )
        got = int((scale.get("spec") or {}).get("replicas", replicas))
        response: dict[str, JsonScalar] = {"replicas": got, "from_replicas": current, "min": lo, "max": hi}
        return self._done(
            step, f"scaled {step.target.key()} from {current} to {got} replicas{note}", response, involved
        )

    async def _deprioritize(self, step: Step) -> Outcome:
        path = self._deployment_path(step.target)
        dep = await self._call("GET", path, ("apps", "deployments", "get"))
        involved = self._involved(dep, "Deployment", "apps/v1")
        if dup := self._duplicate(step, dep, involved):
            return dup
        tier = str(step.proposal.payload.get("tier") or "deprioritized")
        if patches.labels_of(dep).get(patches.LABEL_TIER) == tier:
            return Outcome("refused", f"no change: already labelled {patches.LABEL_TIER}={tier}", involved=involved)
        await self._call(
            "PATCH",
            path,
            ("apps", "deployments", "patch"),
            body=patches.metadata_patch(step.decision, {patches.LABEL_TIER: tier}),
            content_type=MERGE,
            dry_run=step.dry_run,
        )
        return self._done(step, f"labelled {patches.LABEL_TIER}={tier}", {"tier": tier}, involved)

    # ------------------------------------------------------------------ Nodes

    async def _node(self, step: Step) -> Outcome:
        path = f"/api/v1/nodes/{step.target.name}"

        async def write(node: Obj, involved: Obj) -> Outcome:
            plan = self._node_plan(step, node)
            if isinstance(plan, Outcome):
                return Outcome(plan.outcome, plan.message, involved=involved)
            body, message, response = plan
            rv = (node.get("metadata") or {}).get("resourceVersion")
            body = {**body, **patches.metadata_patch(step.decision, body.pop("labels", None), rv)}
            await self._call("PATCH", path, ("", "nodes", "patch"), body=body, content_type=MERGE, dry_run=step.dry_run)
            return self._done(step, message, response, involved)

        return await self._read_then_write(step, path, ("", "nodes", "get"), "Node", "v1", write)

    def _node_plan(self, step: Step, node: Obj) -> Outcome | tuple[Obj, str, dict[str, JsonScalar]]:
        spec = node.get("spec") or {}
        action = step.decision.action
        if action == "taint":
            payload = step.proposal.payload
            key = str(payload.get("key") or "borg-orchestrator.io/contended")
            value = str(payload.get("value") or "")
            effect = str(payload.get("effect") or "PreferNoSchedule")
            taints = patches.with_taint(node, key, value, effect)
            if taints is None:
                return Outcome("refused", f"no change: taint {key}={value}:{effect} already present")
            return {"spec": {"taints": taints}}, f"tainted {key}={value}:{effect}", {"taint": f"{key}={value}:{effect}"}
        if spec.get("unschedulable"):
            return Outcome("refused", "no change: node already cordoned")
        if action == "consolidate":
            body: Obj = {"spec": {"unschedulable": True}, "labels": {patches.LABEL_CONSOLIDATE: "true"}}
            return body, "cordoned for consolidation (drains as its pods are replaced)", {"unschedulable": True}
        return {"spec": {"unschedulable": True}}, "cordoned", {"unschedulable": True}

    # ------------------------------------------------------------------ Pods

    def _pod_path(self, t: TargetRef) -> str:
        return f"/api/v1/namespaces/{t.namespace}/pods/{t.name}"

    async def _evict(self, step: Step) -> Outcome:
        path = self._pod_path(step.target)
        wanted_uid = str(step.proposal.payload.get("pod_uid") or "")

        async def write(pod: Obj, involved: Obj) -> Outcome:
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                return Outcome("refused", "no change: pod is already terminating", involved=involved)
            # Like the Eviction API: only a Running pod counts against a disruption budget.
            if self.s.pdb_precheck and (pod.get("status") or {}).get("phase") == "Running":
                blocked = budgets.eviction_blocked(
                    await self._pdbs(str(step.target.namespace)), dict(meta.get("labels") or {})
                )
                if blocked:
                    return Outcome("refused", f"disruption budget: {blocked}", involved=involved)
            uid = wanted_uid or str(meta.get("uid") or "")
            await self._call(
                "POST",
                path + "/eviction",
                ("", "pods/eviction", "create"),
                body=patches.eviction_body(step.target, uid or None, meta.get("resourceVersion")),
                dry_run=step.dry_run,
                manager=False,
            )
            if not step.dry_run:
                try:  # mark the (now terminating) pod with the decision; it may already be gone
                    await self._call(
                        "PATCH",
                        path,
                        ("", "pods", "patch"),
                        body=patches.metadata_patch(step.decision),
                        content_type=MERGE,
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            return self._done(step, f"evicted {step.target.key()} (uid {uid})", {"uid": uid}, involved)

        # A different pod under the proposal's name (another UID) conflicts every time: no retry.
        def same_pod(pod: Obj) -> bool:
            return not wanted_uid or wanted_uid == (pod.get("metadata") or {}).get("uid")

        return await self._read_then_write(step, path, ("", "pods", "get"), "Pod", "v1", write, same_pod)

    async def _balloon(self, step: Step) -> Outcome:
        path = self._pod_path(step.target)
        pod = await self._call("GET", path, ("", "pods", "get"))
        involved = self._involved(pod, "Pod", "v1")
        if dup := self._duplicate(step, pod, involved):
            return dup
        total = step.payload_int("memory_request_mib")
        if total is None or total < 1:
            return Outcome("refused", "proposal carries no payload 'memory_request_mib'", involved=involved)
        unsupported = patches.resize_refusal(pod)
        if unsupported is not None:
            return Outcome("refused", f"in-place resize not possible: {unsupported}", involved=involved)
        body, message = patches.resize_body(pod, total)
        if body is None:
            return Outcome("refused", f"no change: {message}", involved=involved)
        try:
            await self._call(
                "PATCH",
                path + "/resize",
                ("", "pods/resize", "patch"),
                body=body,
                content_type=STRATEGIC,
                dry_run=step.dry_run,
            )
        except ApiException as exc:
            if exc.status in (404, 405):
                return Outcome(
                    "refused",
                    "in-place resize (pods/resize) is not supported by this API server",
                    exc.status,
                    _status_body(exc),
                    involved,
                )
            raise
        await self._call(
            "PATCH",
            path,
            ("", "pods", "patch"),
            body=patches.metadata_patch(step.decision),
            content_type=MERGE,
            dry_run=step.dry_run,
        )
        return self._done(step, f"resized in place: {message}", {"memory_request_mib": total}, involved)

    # ------------------------------------------------------------------ Namespaces

    async def _hold(self, step: Step) -> Outcome:
        if step.target.name in self.s.protected_namespaces:
            return Outcome("refused", f"namespace {step.target.name} is protected: its admission is never held")
        path = f"/api/v1/namespaces/{step.target.name}"
        ns = await self._call("GET", path, ("", "namespaces", "get"))
        involved = self._involved(ns, "Namespace", "v1")
        if dup := self._duplicate(step, ns, involved):
            return dup
        if patches.labels_of(ns).get(patches.LABEL_ADMISSION) == "hold":
            return Outcome("refused", "no change: admission already on hold", involved=involved)
        await self._call(
            "PATCH",
            path,
            ("", "namespaces", "patch"),
            body=patches.metadata_patch(step.decision, {patches.LABEL_ADMISSION: "hold"}),
            content_type=MERGE,
            dry_run=step.dry_run,
        )
        return self._done(step, f"labelled {patches.LABEL_ADMISSION}=hold", {"admission": "hold"}, involved)

    # ------------------------------------------------------------------ Events

    async def _event(self, step: Step, result: Outcome, now_ms: int) -> None:
        t = step.target
        # Events on cluster-scoped objects (Node, Namespace) must live in "default" (API validation).
        namespace = t.namespace or self.s.event_namespace
        api_version = {"Deployment": "apps/v1"}.get(t.kind, "v1")
        involved = result.involved or {
            "kind": t.kind,
            "apiVersion": api_version,
            "name": t.name,
            **({"namespace": t.namespace} if t.namespace else {}),
        }
        body = patches.event_body(
            decision=step.decision,
            involved=involved,
            namespace=namespace,
            outcome=result.outcome,
            message=result.message,
            now_ms=now_ms,
            instance=self.instance,
        )
        try:
            await self._call(
                "POST", f"/api/v1/namespaces/{namespace}/events", ("", "events", "create"), body=body, manager=False
            )
        except ApiException as exc:
            if exc.status != 409:  # 409: this decision's event exists already (a replay)
                status = _status_body(exc)
                log.warning(
                    "could not record event for %s: %s %s", step.decision.decision_id, exc.status, status["message"]
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("could not record event for %s: %s", step.decision.decision_id, exc)


async def wait_ready(api: client.ApiClient, timeout_s: float = 30.0) -> None:
    """Wait until the API server answers /readyz (used at start-up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await api.call_api(
                "/readyz", "GET", auth_settings=["BearerToken"], _return_http_data_only=True, _request_timeout=5
            )
            return
        except (ApiException, aiohttp.ClientError, OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
