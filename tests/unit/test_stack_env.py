"""`borgctl up` wires the services it starts to the local stack (tracing, kubeconfig) unless told otherwise."""

from __future__ import annotations

import subprocess

import pytest

from borgctl import stack


@pytest.fixture
def local_stack(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Which infra answers healthy; kube.sh kubeconfig prints a fixed path."""
    health = {"kafka": True, "jaeger": True, "kube": True}
    monkeypatch.setattr(stack, "_healthy", lambda infra: health[infra.name])

    def run_script(infra: stack.Infra, action: str, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
        assert (infra.name, action) == ("kube", "kubeconfig")
        return subprocess.CompletedProcess([], 0, stdout="/state/kube/admin.kubeconfig\n", stderr="")

    monkeypatch.setattr(stack, "run_script", run_script)
    return health


def test_a_bare_environment_gets_the_local_jaeger_and_kubeconfig(local_stack: dict[str, bool]) -> None:
    wired, notes = stack.local_service_env({"PATH": "/usr/bin"})
    assert wired == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
        "KUBECONFIG": "/state/kube/admin.kubeconfig",
    }
    assert any("local Jaeger" in n for n in notes) and any("local control plane" in n for n in notes)


def test_what_the_operator_set_is_kept(local_stack: dict[str, bool]) -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "KUBECONFIG": "/home/me/.kube/config"}
    wired, notes = stack.local_service_env(environ)
    assert wired == {}
    assert "tracing: to http://collector:4317 (OTEL_EXPORTER_OTLP_ENDPOINT)" in notes
    assert "kubernetes: KUBECONFIG=/home/me/.kube/config" in notes


@pytest.mark.parametrize("value", ["true", "TRUE", " true "])
def test_otel_sdk_disabled_turns_tracing_off(local_stack: dict[str, bool], value: str) -> None:
    wired, notes = stack.local_service_env({"OTEL_SDK_DISABLED": value})
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in wired
    assert "tracing: off (OTEL_SDK_DISABLED=true)" in notes


def test_nothing_is_wired_to_what_is_not_running(
    local_stack: dict[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    local_stack.update(jaeger=False, kube=False)

    def no_kubeconfig(infra: stack.Infra, action: str, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 1, stdout="", stderr="kube: error: admin.kubeconfig does not exist")

    monkeypatch.setattr(stack, "run_script", no_kubeconfig)
    wired, notes = stack.local_service_env({})
    assert wired == {}
    assert any(n.startswith("tracing: off") for n in notes)
    assert any("referee, cluster-watcher and pod-regime will not start" in n for n in notes)


def test_services_honour_otel_sdk_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.runtime.settings import RuntimeSettings

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    assert RuntimeSettings().otel_sdk_disabled is False
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert RuntimeSettings().otel_sdk_disabled is True
