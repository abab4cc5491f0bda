"""deploy/components/kafka-sasl-ssl on the project's real kube-apiserver (as test_deploy_kube.py does).

Rendered on top of the base with kafka-external (the combination an operator applies), the
component must: set only variables the services' settings read, in both namespaces' borg-config;
mount the Secret into every borg-orchestrator container at the paths those variables name; keep
the secret out of the environment; and be accepted by a server-side dry run (schema, Pod
Security, the node agent's admission policy).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from tests.integration.test_deploy_kube import (
    DEPLOY,
    NAMESPACES,
    Doc,
    Kube,
    _settings_variables,
    assert_accepted,
    containers,
    dry_run_apply,
    kube,  # noqa: F401 (fixture)
    namespaces,  # noqa: F401 (fixture)
    render,
    workloads,
)

COMPONENT = DEPLOY / "components" / "kafka-sasl-ssl"
pytestmark = [pytest.mark.integration, pytest.mark.kube]


def _env_file(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.fixture(scope="module")
def secured(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:  # noqa: F811
    overlay = tmp_path_factory.mktemp("overlay")
    rel = os.path.relpath(DEPLOY, overlay)  # kustomize takes relative paths only
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{rel}/base"],
        "components": [f"{rel}/components/kafka-external", f"{rel}/components/kafka-sasl-ssl"],
    }))
    return render(kube, overlay)


def test_component_sets_only_settings_the_services_read_in_both_namespaces(secured: list[Doc]) -> None:
    wanted = _env_file(COMPONENT / "kafka-security.env")
    assert wanted["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert not set(wanted) - _settings_variables()
    maps = [d for d in secured if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("borg-config")]
    assert {m["metadata"]["namespace"] for m in maps} == set(NAMESPACES)
    for config in maps:
        assert {k: config["data"][k] for k in wanted} == wanted, config["metadata"]["namespace"]
        assert "KAFKA_SASL_PASSWORD" not in config["data"]  # the secret only ever as a file


def test_every_borg_container_mounts_the_secret_at_the_configured_paths(secured: list[Doc]) -> None:
    env = _env_file(COMPONENT / "kafka-security.env")
    mounted = 0
    for workload in workloads(secured):
        spec = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in containers(workload):
            if not str(container["image"]).split("/")[-1].startswith("borg-orchestrator:"):
                continue
            where = f"{workload['metadata']['name']}/{container['name']}"
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == "kafka-client"]
            assert mount["readOnly"] is True, where
            secret = volumes["kafka-client"]["secret"]
            assert secret["secretName"] == "borg-kafka-client", where
            assert secret["defaultMode"] == 0o440 and spec["securityContext"]["fsGroup"] == 10001, where
            for key in ("KAFKA_SASL_PASSWORD_FILE", "KAFKA_SSL_CAFILE"):
                assert Path(env[key]).parent == Path(mount["mountPath"]), (where, key)
            mounted += 1
    assert mounted >= 14  # every service, the node agent and topic-init


def test_component_is_accepted_by_the_api_server(kube: Kube, namespaces: None, secured: list[Doc]) -> None:  # noqa: F811
    assert_accepted(dry_run_apply(kube, secured), secured)
