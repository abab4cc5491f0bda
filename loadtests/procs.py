"""The pipeline under test: service subprocesses in one topic namespace, started and always stopped.

Each service runs as ``python -m borgctl.main serve <name>`` (what a container runs)
with ``BORG_TOPIC_PREFIX`` set to the run's prefix, its health endpoint on a port
chosen here (so readiness is ``GET /readyz`` = 200), consumer groups named with the
prefix, the referee in shadow mode (no Kubernetes calls) and tracing export off
unless asked for. Logs go to ``<out>/logs/<name>.log``. Stopping is SIGTERM to the
process group this runner created, a bounded wait, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from borgctl.registry import SERVICES, ServiceEntry

ROOT = Path(__file__).resolve().parent.parent
STREAM_SERVICES = ("features", "regime", "anomaly", "risk")
DECISION_SERVICES = ("agent-reliability", "agent-efficiency", "agent-admission", "referee")
PIPELINE = (*STREAM_SERVICES, *DECISION_SERVICES)


class PipelineError(Exception):
    """A service of the pipeline could not be started or died."""


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LISTEN_PORTS_FROM = 20000
"""Lowest port handed out for a listener: above the well-known and registered ports services here use (Kafka 9092,
Jaeger 16686, the API server 6443, health 8080/8090 ...)."""


def ephemeral_range(source: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default when unreadable)."""
    try:
        low, high = (int(part) for part in source.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(rng: random.Random | None = None, ephemeral: tuple[int, int] | None = None) -> int:
    """A loopback port free now, for a listener the caller (often a child process) binds later.

    Chosen outside the ephemeral range: a port the kernel handed out for ``bind(0)`` is in that range, so between
    this probe and the real bind any outgoing connection (a Kafka client opens many) could take it as its local port
    -- seen in CI as the scheduler extender's ``EADDRINUSE``. Random within the range so concurrent callers rarely
    pick the same one.
    """
    low, high = ephemeral or ephemeral_range()
    pool = [span for span in ((LISTEN_PORTS_FROM, low - 1), (high + 1, 65535)) if span[1] - span[0] >= 1000]
    chooser = rng or random.Random()
    for _ in range(200):
        first, last = chooser.choice(pool) if pool else (LISTEN_PORTS_FROM, 65535)
        port = chooser.randint(first, last)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free loopback port outside the ephemeral range {low}-{high} after 200 tries")


def group_env(name: str, prefix: str) -> dict[str, str]:
    """Consumer-group settings of the services that take one (stream processors derive theirs from the prefix)."""
    if name == "referee":
        return {"REFEREE_GROUP_ID": f"{prefix}referee"}
    if name.startswith("agent-"):
        kind = name.removeprefix("agent-").upper()
        return {f"AGENT_{kind}_GROUP_ID": f"{prefix}{name}"}
    return {}


def select_services(spec: str, available: Iterable[ServiceEntry] = SERVICES) -> list[str]:
    """`all` | `stream` | `none` | comma list → service names that exist in this build, pipeline order."""
    present = {s.name for s in available if s.available()}
    if spec == "none":
        return []
    if spec in ("all", "stream"):
        wanted: tuple[str, ...] = PIPELINE if spec == "all" else STREAM_SERVICES
        return [n for n in wanted if n in present]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in {s.name for s in available}]
    if unknown:
        raise ValueError(f"--services: unknown service(s) {', '.join(unknown)}")
    missing = [n for n in names if n not in present]
    if missing:
        raise ValueError(f"--services: not available in this build: {', '.join(missing)}")
    return names


@dataclass
class ServiceProc:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 8) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


@dataclass
class Pipeline:
    bootstrap: str
    prefix: str
    out_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    otel: bool = False
    procs: list[ServiceProc] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    """Optional services that exited during start-up, with why (their last log line)."""

    def env_for(self, entry: ServiceEntry, port: int) -> dict[str, str]:
        env = dict(os.environ)
        if not self.otel:
            env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        env.update(dict(entry.env))
        env.update(
            {
                "KAFKA_BOOTSTRAP": self.bootstrap,
                "BORG_TOPIC_PREFIX": self.prefix,
                "LOG_FORMAT": "json",
                "LOG_LEVEL": env.get("LOG_LEVEL", "INFO"),
                "HEALTH_HOST": "127.0.0.1",
                "HEALTH_PORT": str(port),
                "REFEREE_MODE": "shadow",
                "PYTHONUNBUFFERED": "1",
                **group_env(entry.name, self.prefix),
            }
        )
        env.update(self.extra_env)
        return env

    def start(self, names: Iterable[str]) -> None:
        logs = self.out_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        by_name = {s.name: s for s in SERVICES}
        for name in names:
            entry = by_name[name]
            port = free_port()
            log_path = logs / f"{name}.log"
            with log_path.open("ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "borgctl.main", "serve", name],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env_for(entry, port),
                    cwd=ROOT,
                    start_new_session=True,
                )
            self.procs.append(ServiceProc(name, proc, port, log_path))

    def check_alive(self) -> None:
        for sp in self.procs:
            code = sp.proc.poll()
            if code is not None:
                raise PipelineError(f"service {sp.name} exited with code {code}; last log lines:\n{sp.tail()}")

    def drop_exited(self) -> None:
        """Forget services that exited (optional ones: a build may have a service but not its model)."""
        for sp in list(self.procs):
            code = sp.proc.poll()
            if code is not None:
                last = sp.tail(1).strip()
                self.dropped[sp.name] = f"exited at start-up with code {code}: {last[-300:]}"
                self.procs.remove(sp)

    async def wait_ready(self, timeout_s: float, *, optional: bool = False) -> dict[str, float]:
        """Seconds each service took to answer /readyz with 200.

        Raises when a service dies or is not ready in time; with ``optional``, a service that
        exits during start-up is dropped instead (see ``dropped``).
        """
        import aiohttp

        started = time.monotonic()
        ready: dict[str, float] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while len(ready) < len(self.procs):
                if optional:
                    self.drop_exited()
                self.check_alive()
                for sp in self.procs:
                    if sp.name in ready:
                        continue
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                        async with session.get(f"http://127.0.0.1:{sp.port}/readyz") as resp:
                            if resp.status == 200:
                                ready[sp.name] = time.monotonic() - started
                if time.monotonic() - started > timeout_s:
                    waiting = [sp.name for sp in self.procs if sp.name not in ready]
                    raise PipelineError(f"not ready within {timeout_s:.0f}s: {', '.join(waiting)}")
                await asyncio.sleep(0.5)
        return ready

    def stop(self, grace_s: float = 15.0) -> dict[str, int | None]:
        """SIGTERM every service's process group, wait (bounded), SIGKILL what is left; exit codes."""
        for sp in self.procs:
            if sp.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(sp.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for sp in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                sp.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        codes: dict[str, int | None] = {}
        for sp in self.procs:
            if sp.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(sp.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    sp.proc.wait(timeout=5)
            codes[sp.name] = sp.proc.returncode
        return codes


def kafka_pid() -> int | None:
    """The local broker's pid from infra/kafka/kafka.sh's pid file (None when not found)."""
    from borgctl.paths import state_dir

    try:
        pid = int((state_dir() / "kafka" / "kafka.pid").read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


async def delete_topics(bootstrap: str, prefix: str) -> int:
    """Delete every topic of the run's namespace (including the stream processors' changelog topics)."""
    from services.runtime.admin import connect_admin

    admin = await connect_admin(bootstrap, timeout_s=10)
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
        return len(names)
    finally:
        await admin.close()

