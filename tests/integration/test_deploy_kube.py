"""deploy/ against the project's real Kubernetes control plane (infra/kube/kube.sh).

* Every overlay (and every optional component on top of the base) is rendered with the
  project's kubectl (`kubectl kustomize`) and applied with `--dry-run=server`: the API server runs
  its own schema validation and admission on every object and persists nothing. The two
  namespaces are created for real first (a dry run cannot create objects in a namespace that
  does not exist).
* Pod Security: a pod made from every workload template in borg-system is created with a server
  dry run, so the `restricted` level the namespace enforces judges it.
* The node agent's ValidatingAdmissionPolicy is applied for real (cluster-scoped, bound to
  borg-node only) and must admit the DaemonSet's pod and deny every widening of it.
* deploy/scheduler-extender/kube-scheduler-config.yaml is loaded, validated and written back by the real
  kube-scheduler (`--write-config-to`, no serving).
"""

from __future__ import annotations

import copy
import glob
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from borgctl.registry import SERVICES
from tests.conftest import env_aliases
from tests.metric_names import missing, used

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBE_SH = ROOT / "infra" / "kube" / "kube.sh"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists())
OPTIONAL_COMPONENTS = ["node-agent-sys-admin", "node-agent-unprivileged", "referee-apply", "extender-learned-shadow",
                       "extender-corunner", "agent-interference", "node-agent-per-pod", "node-agent-resctrl",
                       "interference-guard-band"]
SCHEDULER_CONFIG = DEPLOY / "scheduler-extender" / "kube-scheduler-config.yaml"
NAMESPACES = ("borg-system", "borg-node")
POLICY = "borg-node-agent-least-privilege"
FIELD_MANAGER = "borg-deploy-tests"
Doc = dict[str, Any]

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(3600)]


class Kube:
    """The project's kubectl and admin kubeconfig (kube.sh builds and starts them)."""

    def __init__(self) -> None:
        cache = Path(os.environ.get("BORG_CACHE", Path.home() / ".cache" / "borg-orchestrator"))
        kubeconfig = subprocess.run(
            ["bash", str(KUBE_SH), "kubeconfig"], capture_output=True, text=True, check=True
        ).stdout.strip()
        self.kubeconfig = kubeconfig
        self.kubectl = self._binary(cache, "kubectl")
        self.scheduler = self._binary(cache, "kube-scheduler")

    @staticmethod
    def _binary(cache: Path, name: str) -> str:
        found = sorted(glob.glob(str(cache / "bin" / f"{name}-v*")))
        assert found, f"{name} not built in {cache / 'bin'} (infra/kube/kube.sh build)"
        return found[-1]

    def run(self, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout


@pytest.fixture(scope="session")
def kube() -> Kube:
    status = subprocess.run(["bash", str(KUBE_SH), "status"], capture_output=True, text=True, check=False)
    if status.returncode != 0:
        started = subprocess.run(["bash", str(KUBE_SH), "start"], capture_output=True, text=True, check=False)
        if started.returncode != 0:
            pytest.fail(f"kube.sh start failed:\n{started.stdout}\n{started.stderr}")
    return Kube()


@pytest.fixture(scope="module")
def namespaces(kube: Kube) -> None:
    """The project's two namespaces, for real, with their Pod Security labels (as the decision-plane tests do)."""
    kube.ok(
        "apply",
        "-f",
        str(DEPLOY / "base" / "namespaces.yaml"),
    )


def render(kube: Kube, directory: Path) -> list[Doc]:
    out = kube.ok("kustomize", str(directory))
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def rendered(kube: Kube) -> dict[str, list[Doc]]:
    return {name: render(kube, DEPLOY / "overlays" / name) for name in OVERLAYS}


def dry_run_apply(kube: Kube, docs: list[Doc]) -> subprocess.CompletedProcess[str]:
    stream = yaml.safe_dump_all(docs, sort_keys=False)
    return kube.run("apply", "--dry-run=server", f"--field-manager={FIELD_MANAGER}", "-f", "-", stdin=stream)


def assert_accepted(result: subprocess.CompletedProcess[str], docs: list[Doc]) -> None:
    assert result.returncode == 0, f"rejected by the API server:\n{result.stdout}\n{result.stderr}"
    assert "would violate PodSecurity" not in result.stderr, result.stderr
    accepted = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(docs), result.stdout


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def pod_from(workload: Doc, name: str | None = None) -> Doc:
    template = copy.deepcopy(workload["spec"]["template"])
    spec = template["spec"]
    spec.pop("serviceAccountName", None)  # the dry-run pod must not need the (dry-run) ServiceAccount
    for claim in workload["spec"].get("volumeClaimTemplates", []):  # as the StatefulSet controller mounts them
        claim_name = f"{claim['metadata']['name']}-{workload['metadata']['name']}-0"
        spec.setdefault("volumes", []).append(
            {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"deploy-check-{workload['metadata']['name']}",
            "namespace": workload["metadata"]["namespace"],
            "labels": template["metadata"].get("labels", {}),
        },
        "spec": spec,
    }


def dry_run_create(kube: Kube, pod: Doc) -> subprocess.CompletedProcess[str]:
    return kube.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))


# ---------------------------------------------------------------- the API server's verdict


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_is_accepted_by_the_api_server(
    kube: Kube, namespaces: None, overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    assert_accepted(dry_run_apply(kube, docs), docs)


@pytest.mark.parametrize("component", OPTIONAL_COMPONENTS)
def test_optional_component_is_accepted_by_the_api_server(
    kube: Kube, namespaces: None, component: str, tmp_path: Path
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)  # kustomize takes relative paths only
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/base"],
                "components": [f"{rel}/components/kafka-in-cluster", f"{rel}/components/{component}"],
            }
        )
    )
    docs = render(kube, overlay)
    assert_accepted(dry_run_apply(kube, docs), docs)
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet"]
    caps = agent["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
    expected_caps = {"node-agent-sys-admin": ["SYS_ADMIN"], "node-agent-unprivileged": []}.get(component, ["PERFMON"])
    assert caps.get("add", []) == expected_caps
    (referee,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "referee"]
    env = {e["name"]: e.get("value") for e in referee["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REFEREE_MODE"] == ("apply" if component == "referee-apply" else "dry-run")
    assert env["REFEREE_MAX_DISRUPTIONS"] == ("10" if component == "interference-guard-band" else "5")
    (extender,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "scheduler-extender"]
    spec = extender["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    learned, corunner = component == "extender-learned-shadow", component == "extender-corunner"
    assert (env.get("EXTENDER_POLICY"), env.get("EXTENDER_WEIGHT_CORUNNER"), spec["automountServiceAccountToken"]) == (
        ("learned", None, True) if learned else (None, "0.5", True) if corunner else (None, None, False)
    )
    # read-only list/watch of exactly what services/scheduler_extender/kube.py watches, for its ServiceAccount
    roles = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].startswith("borg-scheduler-ext")]
    watch = [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]}]
    assert [r["rules"] for r in roles] == ([watch] if learned or corunner else [])
    (reliability,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "agent-reliability"]
    spec = reliability["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    banded = component == "interference-guard-band"  # includes agent-interference
    interference = component == "agent-interference" or banded
    assert (env.get("AGENT_RELIABILITY_INTERFERENCE"), spec["automountServiceAccountToken"]) == (
        ("true", True) if interference else (None, False))
    assert env.get("AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN") == ("1.20" if banded else None)
    roles = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].startswith("borg-agent-reliab")]
    lists = [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list"]}]
    assert [r["rules"] for r in roles] == ([lists] if interference else [])
    spec = agent["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    host_paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    if component in ("node-agent-per-pod", "node-agent-resctrl"):
        resctrl = component == "node-agent-resctrl"
        assert host_paths == ["/sys/fs/cgroup", *(["/sys/fs/resctrl"] if resctrl else [])]
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "host-cgroup"]
        assert mount["readOnly"] is True
        assert env["NODE_AGENT_CGROUP_ROOT"].startswith(mount["mountPath"] + "/")
        writable = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "host-resctrl"]
        assert [(m["mountPath"], m.get("readOnly", False)) for m in writable] == (
            [("/host/resctrl", False)] if resctrl else [])
        assert env.get("NODE_AGENT_RESCTRL_ROOT") == ("/host/resctrl" if resctrl else None)
    else:
        assert (host_paths, env.get("NODE_AGENT_CGROUP_ROOT")) == ([], None)


def test_every_borg_system_pod_meets_the_restricted_pod_security_level(
    kube: Kube, namespaces: None, rendered: dict[str, list[Doc]]
) -> None:
    labels = json.loads(kube.ok("get", "namespace", "borg-system", "-o", "json"))["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    checked = 0
    for docs in rendered.values():
        for workload in workloads(docs):
            if workload["metadata"]["namespace"] != "borg-system":
                continue
            result = dry_run_create(kube, pod_from(workload))
            assert result.returncode == 0, f"{workload['metadata']['name']}: {result.stderr}"
            assert "PodSecurity" not in result.stderr, result.stderr
            checked += 1
    assert checked >= 7


@pytest.fixture(scope="module")
def node_agent_policy(kube: Kube, rendered: dict[str, list[Doc]]) -> Doc:
    """The admission policy and binding, applied for real (they only bind namespace borg-node)."""
    docs = next(iter(rendered.values()))
    policy = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
              and d["metadata"]["name"].startswith("borg-node-agent")]
    assert len(policy) == 2
    kube.ok(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(policy),
    )
    (agent,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return agent


# Each is one way to widen the node agent's pod; every one must be denied by the policy itself.
WIDENINGS: dict[str, list[tuple[str, Any]]] = {
    "privileged": [
        ("containers.0.securityContext.privileged", True),
        ("containers.0.securityContext.allowPrivilegeEscalation", True),
    ],
    "extra capability": [("containers.0.securityContext.capabilities.add", ["PERFMON", "NET_ADMIN"])],
    "sys_admin": [("containers.0.securityContext.capabilities.add", ["SYS_ADMIN"])],
    "no drop ALL": [("containers.0.securityContext.capabilities.drop", [])],
    "privilege escalation": [("containers.0.securityContext.allowPrivilegeEscalation", True)],
    "writable root": [("containers.0.securityContext.readOnlyRootFilesystem", False)],
    "host pid": [("hostPID", True)],
    "host network": [("hostNetwork", True)],
    "hostPath": [("volumes.0", {"name": "tmp", "hostPath": {"path": "/sys/kernel/debug"}})],
    "unconfined seccomp": [("securityContext.seccompProfile", {"type": "Unconfined"})],
}


def widened(pod: Doc, changes: list[tuple[str, Any]]) -> Doc:
    pod = copy.deepcopy(pod)
    for path, value in changes:
        node: Any = pod["spec"]
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        last = keys[-1]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return pod


def admitted_once_enforced(kube: Kube, pod: Doc, policy: str) -> str:
    """Wait until ``policy`` denies a widened ``pod``, then check ``pod`` itself is admitted; its denial marker."""
    denied_marker = f"ValidatingAdmissionPolicy '{policy}'"
    # the policy reaches the admission plugin's cache within seconds: poll on a denial
    deadline = time.monotonic() + 30
    probe = widened(pod, WIDENINGS["host pid"])
    while denied_marker not in dry_run_create(kube, probe).stderr:
        assert time.monotonic() < deadline, f"{policy} never started denying pods"
        time.sleep(0.5)
    accepted = dry_run_create(kube, pod)
    assert accepted.returncode == 0, accepted.stderr
    return denied_marker


def test_node_agent_policy_admits_the_daemonset_pod_and_nothing_wider(
    kube: Kube, namespaces: None, node_agent_policy: Doc
) -> None:
    pod = pod_from(node_agent_policy, "deploy-check-node-agent")
    assert pod["metadata"]["namespace"] == "borg-node"
    denied_marker = admitted_once_enforced(kube, pod, POLICY)
    for what, changes in WIDENINGS.items():
        result = dry_run_create(kube, widened(pod, changes))
        assert result.returncode != 0, f"{what} was admitted"
        assert denied_marker in result.stderr, f"{what} was not denied by the policy: {result.stderr}"


@pytest.mark.parametrize("component", ["node-agent-per-pod", "node-agent-resctrl"])
def test_per_pod_component_policy_admits_its_host_mounts_and_no_other_host_path(
    kube: Kube, namespaces: None, tmp_path: Path, component: str
) -> None:
    """components/node-agent-per-pod widens the policy by exactly one read-only hostPath;
    components/node-agent-resctrl (which includes it) by that and a writable /sys/fs/resctrl.

    Its policy is applied for real under another name, bound to a namespace of its own, so the base
    policy the other tests apply (same name, bound to borg-node) is left as it is.
    """
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f"{rel}/base"],
        "components": [f"{rel}/components/kafka-in-cluster", f"{rel}/components/{component}"]}))
    docs = render(kube, overlay)
    name, namespace = f"borg-{component}-check", f"borg-{component.removeprefix('node-agent-')}-check"
    mine = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"] == POLICY]
    (policy,) = [d for d in mine if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in mine if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] = {"kubernetes.io/metadata.name": namespace}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    kube.ok("apply", "-f", "-", stdin=yaml.safe_dump_all([ns, policy, binding]))
    try:
        (agent,) = [d for d in docs if d["kind"] == "DaemonSet"]
        pod = pod_from(agent, f"deploy-check-{component}")
        pod["metadata"]["namespace"] = namespace
        denied_marker = admitted_once_enforced(kube, pod, name)
        cgroup = next(i for i, v in enumerate(pod["spec"]["volumes"]) if "hostPath" in v)
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        mount = next(i for i, m in enumerate(mounts) if m["name"] == "host-cgroup")
        host = [v.get("hostPath", {}).get("path") for v in pod["spec"]["volumes"]]
        assert ("/sys/fs/resctrl" in host) == (component == "node-agent-resctrl")
        elsewhere = {"all of /sys writable in resctrl's place": [
            (f"volumes.{host.index('/sys/fs/resctrl')}.hostPath.path", "/sys")]} if "/sys/fs/resctrl" in host else {}
        for what, changes in {
            **WIDENINGS,
            "another hostPath": [(f"volumes.{cgroup}.hostPath.path", "/var/run")],
            "the cgroup tree writable": [(f"containers.0.volumeMounts.{mount}.readOnly", False)],
            **elsewhere,
        }.items():
            if what == "hostPath":
                continue  # /sys/kernel/debug in place of the emptyDir: covered by "another hostPath"
            result = dry_run_create(kube, widened(pod, changes))
            assert result.returncode != 0, f"{what} was admitted"
            assert denied_marker in result.stderr, f"{what} was not denied by the policy: {result.stderr}"
        result = dry_run_create(kube, widened(pod, WIDENINGS["hostPath"]))
        assert denied_marker in result.stderr and "/sys/fs/cgroup" in result.stderr, result.stderr
    finally:
        kube.run("delete", "--ignore-not-found", "validatingadmissionpolicybinding", name)
        kube.run("delete", "--ignore-not-found", "validatingadmissionpolicy", name)
        kube.run("delete", "--ignore-not-found", "--wait=false", "namespace", namespace)


# ---------------------------------------------------------------- what the manifests promise


def containers(workload: Doc) -> list[Doc]:
    spec = workload["spec"]["template"]["spec"]
    return list(spec["containers"]) + list(spec.get("initContainers", []))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_registry_service_is_deployed_once(overlay: str, rendered: dict[str, list[Doc]]) -> None:
    served: list[str] = []
    for workload in workloads(rendered[overlay]):
        for container in containers(workload):
            args = container.get("args") or container.get("command") or []
            if "serve" in args:
                served.append(args[args.index("serve") + 1])
    assert sorted(served) == sorted(s.name for s in SERVICES)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workloads_are_probed_limited_and_locked_down(overlay: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[overlay]
    for workload in workloads(docs):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        pod_sc = pod.get("securityContext", {})
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        if name != "node-agent":
            assert pod_sc.get("runAsNonRoot") is True, f"{name}: runAsNonRoot"
        for container in containers(workload):
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert not sc.get("privileged"), name
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][kind]), f"{name}: {kind}"
            if workload["kind"] != "Job":
                assert container.get("livenessProbe"), f"{name}: liveness probe"
                assert container.get("readinessProbe"), f"{name}: readiness probe"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_has_its_account_service_and_disruption_budget(
    overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    index = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for workload in workloads(docs):
        meta = workload["metadata"]
        spec = workload["spec"]["template"]["spec"]
        account = spec.get("serviceAccountName", "default")
        assert ("ServiceAccount", meta["namespace"], account) in index, f"{meta['name']}: ServiceAccount"
        if workload["kind"] == "Job":
            continue
        labels = workload["spec"]["template"]["metadata"]["labels"]
        services = [
            d
            for d in docs
            if d["kind"] == "Service"
            and d["metadata"]["namespace"] == meta["namespace"]
            and d["spec"].get("selector", {}).items() <= labels.items()
            and d["spec"].get("selector")
        ]
        assert services, f"{meta['name']}: no Service selects it"
        if workload["kind"] in ("Deployment", "StatefulSet"):
            assert any(
                b["metadata"]["namespace"] == meta["namespace"]
                and b["spec"]["selector"]["matchLabels"].items() <= labels.items()
                for b in budgets
            ), f"{meta['name']}: no PodDisruptionBudget"


def _settings_variables() -> set[str]:
    """Every environment variable some service's settings object reads."""
    from services.agents.settings import AdmissionSettings, EfficiencySettings, ReliabilitySettings
    from services.cluster_watcher.settings import WatcherSettings
    from services.node_agent.settings import NodeAgentSettings
    from services.referee.settings import RefereeSettings
    from services.runtime.settings import RuntimeSettings
    from services.scheduler_extender.settings import ExtenderSettings

    # not settings: KUBECONFIG (kubernetes clients), OTEL_RESOURCE_ATTRIBUTES (read by the OpenTelemetry
    # SDK) and the downward-API names it is built from
    names = {"KUBECONFIG", "OTEL_RESOURCE_ATTRIBUTES", "POD_NAME", "POD_NAMESPACE"}
    for cls in (
        RuntimeSettings,
        NodeAgentSettings,
        WatcherSettings,
        RefereeSettings,
        ExtenderSettings,
        ReliabilitySettings,
        EfficiencySettings,
        AdmissionSettings,
    ):
        prefix = str(cls.model_config.get("env_prefix", "")).upper()
        names |= {f"{prefix}{name.upper()}" for name in cls.model_fields}
        names |= {alias for f in cls.model_fields.values() for alias in env_aliases(f.validation_alias)}
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_environment_names_are_settings_the_services_read(overlay: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[overlay]
    known = _settings_variables()
    configs = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"
    }
    for workload in workloads(docs):
        for container in containers(workload):
            if not str(container["image"]).split("/")[-1].startswith("borg-orchestrator:"):
                continue
            names = {e["name"] for e in container.get("env", [])}
            for source in container.get("envFrom", []):
                names |= set(configs[(workload["metadata"]["namespace"], source["configMapRef"]["name"])])
            unknown = sorted(names - known)
            assert not unknown, f"{workload['metadata']['name']}: no settings object reads {unknown}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_names_its_pod_in_its_spans(overlay: str, rendered: dict[str, list[Doc]]) -> None:
    """k8s.pod.name / k8s.namespace.name resource attributes from the downward API, defined before use."""
    for workload in workloads(rendered[overlay]):
        for container in containers(workload):
            if not str(container["image"]).split("/")[-1].startswith("borg-orchestrator:"):
                continue
            env = container.get("env", [])
            order = [e["name"] for e in env]
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert "OTEL_RESOURCE_ATTRIBUTES" in order, where
            attrs = next(e["value"] for e in env if e["name"] == "OTEL_RESOURCE_ATTRIBUTES")
            assert attrs == "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)", where
            fields = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in env}
            assert fields.get("POD_NAME") == "metadata.name" and fields.get("POD_NAMESPACE") == "metadata.namespace"
            # $(VAR) expands only to variables defined earlier in the list
            assert order.index("POD_NAME") < order.index("OTEL_RESOURCE_ATTRIBUTES"), where
            assert order.index("POD_NAMESPACE") < order.index("OTEL_RESOURCE_ATTRIBUTES"), where


def test_node_agent_is_a_daemonset_with_only_perfmon(rendered: dict[str, list[Doc]]) -> None:
    for docs in rendered.values():
        (agent,) = [d for d in docs if d["kind"] == "DaemonSet"]
        assert agent["metadata"]["name"] == "node-agent"
        assert agent["metadata"]["namespace"] == "borg-node"
        spec = agent["spec"]["template"]["spec"]
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        assert all("hostPath" not in v for v in spec.get("volumes", []))
        assert spec["automountServiceAccountToken"] is False
        (container,) = spec["containers"]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["PERFMON"]}


def test_kafka_components_set_the_bootstrap_in_both_namespaces(rendered: dict[str, list[Doc]]) -> None:
    expected = {
        "in-cluster-kafka": "kafka.borg-system.svc:9092",
        "existing-kafka": _env_value(DEPLOY / "components" / "kafka-external" / "kafka.env"),
    }
    for overlay, docs in rendered.items():
        maps = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("borg-config")]
        assert {m["metadata"]["namespace"] for m in maps} == set(NAMESPACES), overlay
        for config in maps:
            assert config["data"]["KAFKA_BOOTSTRAP"] == expected[overlay], overlay
        statefulsets = [d["metadata"]["name"] for d in docs if d["kind"] == "StatefulSet"]
        assert statefulsets == (["kafka"] if overlay == "in-cluster-kafka" else []), overlay


def _env_value(path: Path, key: str = "KAFKA_BOOTSTRAP") -> str:
    for line in path.read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    raise AssertionError(f"{key} not in {path}")


# ---------------------------------------------------------------- kube-scheduler


def test_scheduler_config_is_accepted_by_kube_scheduler(kube: Kube, tmp_path: Path) -> None:
    source = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    (extender,) = source["extenders"]
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is True
    assert (extender["filterVerb"], extender["prioritizeVerb"]) == ("filter", "prioritize")
    assert extender["urlPrefix"] == "http://scheduler-extender.borg-system.svc:8090"

    def load(config: Doc) -> subprocess.CompletedProcess[str]:
        path, out = tmp_path / "config.yaml", tmp_path / "written.yaml"
        path.write_text(yaml.safe_dump({**config, "clientConnection": {"kubeconfig": kube.kubeconfig}}))
        out.unlink(missing_ok=True)
        return subprocess.run(
            [kube.scheduler, "--config", str(path), "--secure-port", "0", "--write-config-to", str(out)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    result = load(source)
    assert result.returncode == 0, result.stderr[-2000:]
    written = yaml.safe_load((tmp_path / "written.yaml").read_text())
    (loaded,) = written["extenders"]
    assert all(loaded.get(key, False) == value for key, value in extender.items()), loaded
    # the same binary rejects a broken extender entry: the check above is a real validation
    broken = copy.deepcopy(source)
    broken["extenders"][0]["weight"] = 0
    rejected = load(broken)
    assert rejected.returncode != 0
    assert "weight" in rejected.stderr


# ---------------------------------------------------------------- network policies and alerts


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A LabelSelector's verdict (matchLabels and the In / NotIn / Exists / DoesNotExist expressions)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        value, op = labels.get(e["key"]), e["operator"]
        if (op == "In" and value not in e["values"]) or (op == "NotIn" and value in e["values"]):
            return False
        if (op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
            return False
    return True


def allowed(docs: list[Doc], namespace: str, labels: dict[str, str], direction: str, port: int,
            protocol: str = "TCP") -> bool:
    """Whether the NetworkPolicies let a pod (namespace, labels) send (Egress) or receive (Ingress) on ``port``,
    from or to anywhere (the peers' own policies are not evaluated here). A pod no policy selects for that
    direction is open, as in Kubernetes."""
    rules_key = "egress" if direction == "Egress" else "ingress"
    selecting = [
        d for d in docs
        if d["kind"] == "NetworkPolicy" and d["metadata"]["namespace"] == namespace
        and direction in d["spec"].get("policyTypes", ["Ingress"]) and _selects(d["spec"]["podSelector"], labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            ports = rule.get("ports")
            if ports is None or any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports):
                return True
    return False


def _pods(docs: list[Doc]) -> dict[str, tuple[str, dict[str, str]]]:
    return {w["metadata"]["name"]: (w["metadata"]["namespace"], w["spec"]["template"]["metadata"]["labels"])
            for w in workloads(docs)}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_deny_by_default_and_allow_exactly_the_needed_flows(
    overlay: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[overlay]
    denies = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs
              if d["kind"] == "NetworkPolicy" and d["spec"]["podSelector"] == {}
              and set(d["spec"]["policyTypes"]) == {"Ingress", "Egress"} and not d["spec"].get("ingress")
              and not d["spec"].get("egress")}
    assert denies == {("borg-system", "default-deny"), ("borg-node", "default-deny")}
    pods = _pods(docs)
    api_clients = {"referee", "cluster-watcher", "pod-regime"}
    for name, (ns, labels) in pods.items():
        # every workload: DNS, Kafka and the OTLP collector out
        for port, proto in ((53, "UDP"), (53, "TCP"), (9092, "TCP"), (4317, "TCP"), (4318, "TCP")):
            assert allowed(docs, ns, labels, "Egress", port, proto), (name, port, proto)
        # the API server only for the three services that talk to it (pod-regime only lists pods)
        assert allowed(docs, ns, labels, "Egress", 443) == (name in api_clients), name
        # nothing else out, e.g. no SSH or HTTP to anywhere
        assert not allowed(docs, ns, labels, "Egress", 22) and not allowed(docs, ns, labels, "Egress", 80), name
        if name == "kafka":
            assert allowed(docs, ns, labels, "Ingress", 9092) and allowed(docs, ns, labels, "Ingress", 9093)
            continue
        if name == "topic-init":
            assert not allowed(docs, ns, labels, "Ingress", 8080)  # a Job serves nothing
            continue
        # probes, metrics and the dashboard page on 8080; the extender's port only for the extender
        assert allowed(docs, ns, labels, "Ingress", 8080), name
        assert allowed(docs, ns, labels, "Ingress", 8090) == (name == "scheduler-extender"), name
        assert not allowed(docs, ns, labels, "Ingress", 9092), name
    assert ("kafka" in pods) == (overlay == "in-cluster-kafka")


def test_prometheus_operator_component_is_accepted_and_alerts_only_on_exported_metrics(
    kube: Kube, namespaces: None, tmp_path: Path
) -> None:
    # the Prometheus Operator's CRDs are not part of this cluster: stand-ins with open schemas let the
    # API server accept (dry run) what the component renders; the real CRDs validate more
    for kind, plural in (("PodMonitor", "podmonitors"), ("PrometheusRule", "prometheusrules")):
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
        }
        kube.run("apply", "-f", "-", stdin=json.dumps(crd))
        kube.run("wait", "--for=condition=Established", f"crd/{plural}.monitoring.coreos.com", "--timeout=60s")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f"{rel}/base"],
        "components": [f"{rel}/components/kafka-in-cluster", f"{rel}/components/prometheus-operator"],
    }))
    docs = render(kube, overlay)
    assert_accepted(dry_run_apply(kube, docs), docs)
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    # it scrapes every workload of the project by a port each of them names
    for name, (_, labels) in _pods(docs).items():
        if name in ("kafka", "topic-init"):
            continue
        assert _selects(monitor["spec"]["selector"], labels), name
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {"BorgStageStalled", "BorgConsumerLagGrowing", "BorgDeadLettersRising", "BorgRefereeWritesFailing",
            "BorgExtenderBadRequests", "BorgStageLatencyHigh"} <= {a["alert"] for a in alerts}
    for a in alerts:
        assert a["labels"]["severity"] in ("warning", "critical") and a["annotations"]["runbook"], a["alert"]
        assert used(a["expr"]) or a["expr"].startswith("up{"), a["alert"]  # `up`: Prometheus' own
        assert not missing(a["expr"]), f"{a['alert']}: {missing(a['expr'])} exported by no service"
    runbook = (ROOT / "docs" / "deploy.md").read_text()
    for a in alerts:
        assert f"`{a['alert']}`" in runbook, f"{a['alert']} has no runbook line in docs/deploy.md"
