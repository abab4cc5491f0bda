"""docker-compose.yml and docker-compose.loadgen.yml, checked structurally (no Docker engine here).

The files are read the way `docker compose` reads them: YAML with anchors and merge keys, then
`${VAR}`, `${VAR:-default}` and `${VAR:?message}` interpolated from `.env`. What is asserted:
every `borgctl serve` service is there, runs a command `borgctl` accepts, has a healthcheck on its
own /readyz and a memory limit, waits for Kafka, Jaeger and the topic job; infrastructure images
are the official ones at the versions `.env` pins; and the settings the containers get are names
the services' settings objects actually read.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from borgctl.main import DELEGATED, build_parser
from borgctl.registry import SERVICES
from services.runtime.settings import RuntimeSettings
from tests.conftest import env_aliases

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
LOADGEN = ROOT / "docker-compose.loadgen.yml"
DOTENV = ROOT / ".env"

INFRA = {"kafka", "jaeger"}
JOBS = {"topic-init", "loadgen"}  # one-shot: exit when done, so no healthcheck
REGISTRY = {s.name for s in SERVICES}
# The one container that is not UID 10001: live perf sampling needs CAP_PERFMON, which Docker
# (and Kubernetes) only make effective for UID 0. docs/deploy.md, "The node agent and perf".
ROOT_EXCEPTION = {"node-agent": ["PERFMON"]}

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|\$\$")


def read_dotenv(path: Path = DOTENV) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not KEY=VALUE: {raw!r}"
        values[key.strip()] = value.strip()
    return values


def interpolate(value: Any, env: Mapping[str, str], where: str = "") -> Any:
    """Compose's variable substitution, applied to every string of a loaded file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        current = env.get(name)
        if op in (":-", "-"):
            empty = current is None or (op == ":-" and current == "")
            return arg if empty else str(current)
        if op in (":?", "?"):
            if current is None or (op == ":?" and current == ""):
                raise AssertionError(f"{where}: required variable {name} is unset ({arg})")
            return current
        assert current is not None, f"{where}: ${{{name}}} has no default and is not set in .env"
        return current

    return _VAR.sub(substitute, value)


def load(*files: Path) -> dict[str, Any]:
    """Load and merge compose files like `docker compose -f a -f b` (services merged by name)."""
    env = read_dotenv()
    merged: dict[str, Any] = {"services": {}, "volumes": {}}
    for path in files:
        doc = yaml.safe_load(path.read_text())
        doc = interpolate({k: v for k, v in doc.items() if not k.startswith("x-")}, env, path.name)
        for name, service in doc.get("services", {}).items():
            merged["services"].setdefault(name, {}).update(service)
        merged["volumes"].update(doc.get("volumes") or {})
    return merged


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = compose["services"]
    return result


@pytest.fixture(scope="module")
def with_loadgen() -> dict[str, Any]:
    result: dict[str, Any] = load(COMPOSE, LOADGEN)["services"]
    return result


def project_services(services: Mapping[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if name not in INFRA}


def long_running(services: Mapping[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in project_services(services).items() if name not in JOBS}


def test_every_registry_service_runs_its_own_borgctl_serve(services: dict[str, Any]) -> None:
    serving = {name: s["command"] for name, s in services.items() if s.get("command", [None])[0] == "serve"}
    assert set(serving) == REGISTRY, "one compose service per `borgctl serve` name (borgctl/registry.py)"
    for name, command in serving.items():
        assert command == ["serve", name], f"{name}: runs {command}"


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, LOADGEN)], ids=["compose", "compose+loadgen"])
def test_every_command_is_accepted_by_borgctl(files: tuple[Path, ...]) -> None:
    parser = build_parser()
    for name, service in project_services(load(*files)["services"]).items():
        command = service.get("command")
        assert isinstance(command, list), f"{name}: needs an explicit exec-form command"
        if command[0] in DELEGATED:
            # Delegated commands own their arguments: borgctl.main hands them the rest of argv
            # (their modules are plain imports, so mypy and import-linter prove they exist).
            if command[0] == "replay":
                source = command[command.index("--source") + 1]
                assert source in {"synthetic", "perfstat", "alibaba2018", "google2011"}, f"{name}: --source {source}"
            continue
        args = parser.parse_args(command)  # exits (SystemExit) on an unknown command or option
        if command[0] == "serve":
            assert args.service in REGISTRY, f"{name}: unknown service {args.service!r}"
        elif command[0] == "replay":
            source = command[command.index("--source") + 1]
            assert source in {"synthetic", "perfstat", "alibaba2018", "google2011"}, f"{name}: --source {source}"
        else:
            assert command[:2] == ["topics", "create"], f"{name}: unexpected command {command}"


def test_project_services_share_one_image_built_from_the_dockerfile(with_loadgen: dict[str, Any]) -> None:
    env = read_dotenv()
    expected = f"{env['BORG_IMAGE']}:{env['BORG_VERSION']}"
    for name, service in project_services(with_loadgen).items():
        assert service["image"] == expected, f"{name}: image {service['image']}"
    for name, service in project_services(load(COMPOSE)["services"]).items():
        assert service["build"]["dockerfile"] == "Dockerfile", name
        assert service["build"]["context"] == ".", name


def test_infrastructure_uses_official_images_pinned_in_dotenv(services: dict[str, Any]) -> None:
    env = read_dotenv()
    kafka_version = re.search(r"<kafka.version>(.+)</kafka.version>", (ROOT / "infra/kafka/pom.xml").read_text())
    assert kafka_version is not None
    assert services["kafka"]["image"] == env["KAFKA_IMAGE"] == f"apache/kafka:{kafka_version.group(1)}", (
        "compose runs the same Kafka as the local stack (infra/kafka/pom.xml)"
    )
    assert re.fullmatch(r"jaegertracing/jaeger:2\.\d+\.\d+", services["jaeger"]["image"])
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", env["PYTHON_IMAGE"])
    dockerfile_default = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert dockerfile_default is not None
    assert dockerfile_default.group(1) == env["PYTHON_IMAGE"]


def test_kafka_is_kraft_single_node_with_a_named_data_volume(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["CLUSTER_ID"] == read_dotenv()["KAFKA_CLUSTER_ID"]
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    volume, _, target = kafka["volumes"][0].partition(":")
    assert target == env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert volume in compose["volumes"], "Kafka data lives in a named volume"


def test_every_long_running_service_has_a_healthcheck(services: dict[str, Any]) -> None:
    for name, service in services.items():
        check = service.get("healthcheck") or {}
        if name in JOBS:
            assert service["restart"] == "no", f"{name}: a one-shot job is not restarted"
            assert not check.get("test") or check.get("disable"), f"{name}: a job has no healthcheck"
            continue
        assert check.get("test"), f"{name}: no healthcheck"
        assert not check.get("disable"), f"{name}: healthcheck disabled"
        assert all(check.get(key) for key in ("interval", "retries", "timeout")), name


def test_project_healthchecks_hit_readyz_on_health_port_with_python(services: dict[str, Any]) -> None:
    for name, service in long_running(services).items():
        test = service["healthcheck"]["test"]
        assert test[:2] == ["CMD", "python"], f"{name}: the slim image has python, not curl"
        assert "/readyz" in test[-1], name
        assert "HEALTH_PORT" in test[-1], name
        env = service["environment"]
        assert (env["HEALTH_HOST"], env["HEALTH_PORT"]) == ("0.0.0.0", "8080"), name


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, LOADGEN)], ids=["compose", "compose+loadgen"])
def test_dependencies_exist_and_wait_for_health(files: tuple[Path, ...]) -> None:
    services = load(*files)["services"]
    for name, service in services.items():
        for target, spec in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on unknown {target}"
            condition = spec["condition"]
            if target in JOBS:
                assert condition == "service_completed_successfully", f"{name} -> {target}"
            else:
                assert condition == "service_healthy", f"{name} -> {target}: {condition}"
                assert services[target].get("healthcheck", {}).get("test"), f"{target} has no healthcheck"
    for name, service in long_running(services).items():
        deps = service["depends_on"]
        assert {"kafka", "jaeger", "topic-init"} <= set(deps), f"{name} must wait for the infrastructure"
    assert set(services["topic-init"]["depends_on"]) == {"kafka"}


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, LOADGEN)], ids=["compose", "compose+loadgen"])
def test_every_service_has_a_memory_limit(files: tuple[Path, ...]) -> None:
    for name, service in load(*files)["services"].items():
        limit = service.get("deploy", {}).get("resources", {}).get("limits", {}).get("memory")
        assert re.fullmatch(r"\d+[MG]", str(limit)), f"{name}: memory limit {limit!r}"


def test_project_containers_are_non_root_read_only_without_capabilities(with_loadgen: dict[str, Any]) -> None:
    for name, service in project_services(with_loadgen).items():
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        if name in ROOT_EXCEPTION:
            assert (service["user"], service["cap_add"]) == ("0:0", ROOT_EXCEPTION[name]), name
        else:
            assert service["user"] == "10001:10001", name
            assert not service.get("cap_add"), name


def test_environment_names_are_settings_the_services_read(with_loadgen: dict[str, Any]) -> None:
    from services.node_agent.settings import NodeAgentSettings
    from services.referee.settings import RefereeSettings
    from services.scheduler_extender.settings import ExtenderSettings

    def aliases(cls: type[RuntimeSettings]) -> set[str]:
        prefix = str(cls.model_config.get("env_prefix", "")).upper()
        names = {f"{prefix}{field.upper()}" for field in cls.model_fields}
        return names | {alias for f in cls.model_fields.values() for alias in env_aliases(f.validation_alias)}

    known = {"KUBECONFIG"}
    for settings in (RuntimeSettings, RefereeSettings, ExtenderSettings, NodeAgentSettings):
        known |= aliases(settings)
    for name, service in project_services(with_loadgen).items():
        unknown = set(service.get("environment") or {}) - known
        assert not unknown, f"{name}: environment variables no settings object reads: {sorted(unknown)}"


def test_referee_defaults_to_dry_run_with_a_documented_switch(services: dict[str, Any]) -> None:
    from services.referee.settings import Mode

    assert read_dotenv()["REFEREE_MODE"] == "dry-run"
    assert services["referee"]["environment"]["REFEREE_MODE"] == "dry-run"
    modes = typing.get_args(Mode)
    assert "dry-run" in modes
    assert "apply" in modes
    assert "REFEREE_MODE" in (ROOT / "docs" / "deploy.md").read_text()


def test_kubeconfig_is_mounted_read_only_for_the_kubernetes_clients(services: dict[str, Any]) -> None:
    default = read_dotenv()["KUBECONFIG_FILE"]
    kubeconfig = yaml.safe_load((ROOT / default).read_text())
    assert kubeconfig["kind"] == "Config"
    for name in ("referee", "cluster-watcher"):
        service = services[name]
        (mount,) = service["volumes"]
        assert (mount["type"], mount["read_only"]) == ("bind", True), name
        assert (mount["source"], mount["target"]) == (default, service["environment"]["KUBECONFIG"]), name
        assert "host.docker.internal:host-gateway" in service["extra_hosts"], name
    assert services["cluster-watcher"]["profiles"] == ["kube"], "the watcher starts only with a cluster"


def test_scheduler_extender_listens_on_8090_for_kube_scheduler(services: dict[str, Any]) -> None:
    extender = services["scheduler-extender"]
    assert extender["environment"]["EXTENDER_HOST"] == "0.0.0.0"
    assert extender["environment"]["EXTENDER_PORT"] == "8090"
    assert any(str(p).endswith(":8090") for p in extender["ports"])


def test_topic_job_uses_the_configured_prefix(services: dict[str, Any]) -> None:
    command = services["topic-init"]["command"]
    assert command[:2] == ["topics", "create"]
    assert command[command.index("--prefix") + 1] == read_dotenv()["BORG_TOPIC_PREFIX"]


def test_loadgen_overlay_adds_only_the_load_generator(with_loadgen: dict[str, Any], services: dict[str, Any]) -> None:
    assert set(with_loadgen) - set(services) == {"loadgen"}
    loadgen = with_loadgen["loadgen"]
    assert loadgen["command"][0] == "replay"
    assert loadgen["environment"]["KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert loadgen["restart"] == "no"
