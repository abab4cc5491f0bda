"""docker-compose.yml loaded by compose-go, the loader inside `docker compose` v2 (no engine needed).

deploy/tools/compose-check is built once with Go from the module proxy (cached in
$BORG_CACHE/bin, keyed by its sources) and loads the files exactly as `docker compose config`
would: Compose Specification schema, `.env` interpolation, `-f` merging, profiles, normalisation.
tests/unit/test_compose.py checks what the files mean; this checks that Compose accepts them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from borgctl.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "deploy" / "tools" / "compose-check"
INFRA = {"kafka", "jaeger", "topic-init"}

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def compose_check() -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go is needed to build deploy/tools/compose-check (README: Requirements)")
    digest = hashlib.sha256(b"".join((TOOL / f).read_bytes() for f in ("go.mod", "go.sum", "main.go")))
    cache = Path(os.environ.get("BORG_CACHE", Path.home() / ".cache" / "borg-orchestrator"))
    binary = cache / "bin" / f"compose-check-{digest.hexdigest()[:12]}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(f".{binary.name}.{os.getpid()}")
        built = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), "."],
            cwd=TOOL,
            capture_output=True,
            text=True,
            timeout=800,
            env={**os.environ, "CGO_ENABLED": "0"},
            check=False,
        )
        assert built.returncode == 0, f"go build compose-check failed:\n{built.stderr}"
        partial.replace(binary)
    return binary


def load(tool: Path, *files: str, directory: Path = ROOT, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    args = [str(tool), "-C", str(directory)]
    for profile in profiles:
        args += ["-profile", profile]
    result = subprocess.run(
        [*args, *(str(directory / f) for f in files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "BORG_", "KAFKA_"))},
    )
    assert result.returncode == 0, f"compose rejected {files}: {result.stderr}"
    project: dict[str, Any] = json.loads(result.stdout)
    return project


def test_compose_loads_with_every_service(compose_check: Path) -> None:
    project = load(compose_check, "docker-compose.yml")
    registry = {s.name for s in SERVICES}
    # the cluster watcher and pod-regime (each pod's job from the pod list) are in the `kube` profile: they need a
    # cluster
    assert set(project["services"]) == (registry - {"cluster-watcher", "pod-regime"}) | INFRA
    with_kube = load(compose_check, "docker-compose.yml", profiles=("kube",))
    assert set(with_kube["services"]) == registry | INFRA
    # models: the trainer's candidates (profile `trainer`); declared whatever the profiles
    assert set(project["volumes"]) == {"kafka-data", "node-agent-spool", "models"}


def test_compose_with_the_loadgen_overlay_loads(compose_check: Path) -> None:
    project = load(compose_check, "docker-compose.yml", "docker-compose.loadgen.yml")
    loadgen = project["services"]["loadgen"]
    assert loadgen["command"][:3] == ["replay", "--source", "synthetic"]
    assert {dep["condition"] for dep in loadgen["depends_on"].values()} <= {
        "service_healthy",
        "service_completed_successfully",
    }


def test_normalised_services_wait_for_healthy_infrastructure(compose_check: Path) -> None:
    services = load(compose_check, "docker-compose.yml", profiles=("kube",))["services"]
    for name, service in services.items():
        if name in INFRA:
            continue
        conditions = {dep: spec["condition"] for dep, spec in service["depends_on"].items()}
        assert conditions == {
            "kafka": "service_healthy",
            "jaeger": "service_healthy",
            "topic-init": "service_completed_successfully",
        }, name
        assert service["healthcheck"]["test"][:2] == ["CMD", "python"], name
        assert service["deploy"]["resources"]["limits"]["memory"], name


def test_compose_rejects_what_the_specification_does_not_allow(compose_check: Path, tmp_path: Path) -> None:
    """The same loader fails on a misspelt key, so the loads above are real validation."""
    shutil.copy(ROOT / ".env", tmp_path / ".env")
    broken = (
        (ROOT / "docker-compose.yml")
        .read_text()
        .replace("    healthcheck:\n      test:", "    healthchek:\n      test:", 1)
    )
    (tmp_path / "docker-compose.yml").write_text(broken)
    result = subprocess.run(
        [str(compose_check), "-C", str(tmp_path), str(tmp_path / "docker-compose.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "healthchek" in result.stderr
