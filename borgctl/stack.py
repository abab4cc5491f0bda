"""The local stack: Kafka, Jaeger and the Kubernetes API from infra/ scripts, plus services."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from borgctl import supervise
from borgctl.errors import UserError
from borgctl.paths import PROJECT_ROOT, state_dir
from borgctl.registry import SERVICES, ServiceEntry


@dataclass(frozen=True)
class Infra:
    name: str
    script: Path

    def installed(self) -> bool:
        return self.script.exists()


INFRA: tuple[Infra, ...] = (
    Infra("kafka", PROJECT_ROOT / "infra" / "kafka" / "kafka.sh"),
    Infra("jaeger", PROJECT_ROOT / "infra" / "jaeger" / "jaeger.sh"),
    Infra("kube", PROJECT_ROOT / "infra" / "kube" / "kube.sh"),
)


def run_script(infra: Infra, action: str, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(infra.script), action],
        text=True,
        capture_output=capture,
        check=False,
    )


def infra_up(names: list[str]) -> None:
    for infra in INFRA:
        if infra.name not in names:
            continue
        if not infra.installed():
            print(f"{infra.name}: no script at {infra.script}; skipped")
            continue
        result = run_script(infra, "start")
        if result.returncode != 0:
            raise UserError(f"{infra.name} failed to start (exit {result.returncode}); see messages above", 1)


def infra_down(names: list[str]) -> None:
    for infra in reversed(INFRA):
        if infra.name in names and infra.installed():
            run_script(infra, "stop")


def infra_status() -> list[tuple[str, bool, str]]:
    rows = []
    for infra in INFRA:
        if not infra.installed():
            rows.append((infra.name, False, f"{infra.name:<22} {'-':<28} not installed"))
            continue
        result = run_script(infra, "status", capture=True)
        for line in result.stdout.strip().splitlines():
            rows.append((infra.name, result.returncode == 0, line))
    return rows


LOCAL_OTLP_ENDPOINT = "http://127.0.0.1:4317"
"""The local Jaeger's OTLP gRPC receiver (infra/jaeger/jaeger.sh)."""


def local_service_env(environ: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """What services started by ``borgctl up`` need to use the local stack, and one line per choice.

    Tracing goes to the local Jaeger when it is healthy, unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
    already (an operator's own collector) or ``OTEL_SDK_DISABLED=true``; the referee, the cluster watcher and
    pod-regime get the local control plane's kubeconfig when it is up and ``KUBECONFIG`` is not set. Without
    these a plain ``borgctl up`` traced nothing and the Kubernetes services exited at start.
    """
    env = dict(os.environ if environ is None else environ)
    wired: dict[str, str] = {}
    notes: list[str] = []
    by_name = {i.name: i for i in INFRA}
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        notes.append("tracing: off (OTEL_SDK_DISABLED=true)")
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        notes.append(f"tracing: to {env['OTEL_EXPORTER_OTLP_ENDPOINT']} (OTEL_EXPORTER_OTLP_ENDPOINT)")
    elif _healthy(by_name["jaeger"]):
        wired["OTEL_EXPORTER_OTLP_ENDPOINT"] = LOCAL_OTLP_ENDPOINT
        notes.append(f"tracing: to the local Jaeger at {LOCAL_OTLP_ENDPOINT} (OTEL_SDK_DISABLED=true turns it off)")
    else:
        notes.append("tracing: off (the local Jaeger is not running and OTEL_EXPORTER_OTLP_ENDPOINT is not set)")
    kube = by_name["kube"]
    if env.get("KUBECONFIG"):
        notes.append(f"kubernetes: KUBECONFIG={env['KUBECONFIG']}")
    elif kube.installed() and (result := run_script(kube, "kubeconfig", capture=True)).returncode == 0 \
            and result.stdout.strip():
        # the local control plane's admin kubeconfig exists (kube.sh start made it): its health is the
        # referee's and watcher's to report, not a reason to leave them without a cluster
        wired["KUBECONFIG"] = result.stdout.strip()
        notes.append(f"kubernetes: the local control plane (KUBECONFIG={wired['KUBECONFIG']})")
    else:
        notes.append("kubernetes: no KUBECONFIG and no local control plane: referee, cluster-watcher and pod-regime "
                     "will not start")
    return wired, notes


def _healthy(infra: Infra) -> bool:
    return infra.installed() and run_script(infra, "status", capture=True).returncode == 0


# --- services as supervised background processes -------------------------------------------------


def _svc_dir() -> Path:
    path = state_dir() / "services"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pid(entry: ServiceEntry) -> int | None:
    """The supervisor's pid (also its process group) while anything in that group is alive."""
    pid_file = _svc_dir() / f"{entry.name}.pid"
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().strip())
        _reap(pid)
        # the group, not just the pid: a child outliving its supervisor must still be found and stopped
        os.killpg(pid, 0)
        return pid
    except (ValueError, ProcessLookupError, PermissionError):
        return None


def _reap(pid: int) -> None:
    """Collect the supervisor's exit status when this process started it (tests, scripts calling
    service_up in-process): an unreaped zombie would still count as a member of its group."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def service_up(entry: ServiceEntry, extra_env: dict[str, str] | None = None) -> str:
    """Start the service under its supervisor (borgctl/supervise.py), detached in its own process group."""
    pid = _pid(entry)
    if pid is not None:
        return f"{entry.name}: already running (supervisor pid {pid})"
    log = _svc_dir() / f"{entry.name}.log"
    supervise.status_path(entry.name).unlink(missing_ok=True)  # restarts count from this `up`
    env = {**os.environ, "LOG_FORMAT": "json", **dict(entry.env), **(extra_env or {})}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "borgctl.supervise", entry.name],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=PROJECT_ROOT,
            start_new_session=True,
        )
    (_svc_dir() / f"{entry.name}.pid").write_text(str(proc.pid))
    time.sleep(0.2)
    if proc.poll() is not None:
        raise UserError(f"{entry.name} exited at start (code {proc.returncode}); see {log}", 1)
    return f"{entry.name}: started (supervisor pid {proc.pid}, log {log})"


def service_down(entry: ServiceEntry, grace_s: float = 15.0) -> str | None:
    """SIGTERM the supervisor's process group (supervisor and service), SIGKILL it after ``grace_s``."""
    pid = _pid(entry)
    if pid is None:
        return None
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(pid)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    (_svc_dir() / f"{entry.name}.pid").unlink(missing_ok=True)
    return f"{entry.name}: stopped"


def service_state(entry: ServiceEntry) -> str:
    """running/restarting/stopped with the service's pid, restarts and, after a crash, its last error line."""
    supervisor = _pid(entry)
    status = supervise.read_status(entry.name)
    if status is None or status.get("supervisor_pid") != supervisor:
        # no supervisor state (or a stale file from an earlier run)
        return f"running (pid {supervisor})" if supervisor else "stopped"
    restarts = int(status.get("restarts") or 0)
    if supervisor is None:
        state = "stopped"
        if status.get("state") == "failed":
            state += f" (gave up: {supervise.exit_text(status.get('last_exit'))})"
    elif status.get("state") == "running" and _alive(status.get("pid")):
        state = f"running (pid {status['pid']}, restarts {restarts})"
    else:
        state = f"restarting (restarts {restarts}, last exit {supervise.exit_text(status.get('last_exit'))})"
    if (restarts or status.get("state") == "failed") and status.get("last_error"):
        state += f"; last error: {status['last_error']}"
    return state


def services_status() -> list[tuple[str, bool, str]]:
    rows = []
    for entry in SERVICES:
        if not entry.available():
            continue
        pid = _pid(entry)
        rows.append((entry.name, pid is not None, f"{entry.name:<22} {'service':<28} {service_state(entry)}"))
    return rows


def local_services() -> list[ServiceEntry]:
    return [s for s in SERVICES if s.in_local_stack and s.available()]
