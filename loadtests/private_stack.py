"""A broker and a kube-apiserver of the chaos run's own, so restarting them disturbs nobody else.

* :class:`PrivateBroker` is ``infra/kafka/kafka.sh`` with its own ``BORG_STATE`` (pid file,
  logs, data) and ports; ``BORG_CACHE`` stays the default, so the jars are shared. A restart
  is ``kafka.sh stop`` + ``kafka.sh start`` on the same data directory.
* :class:`PrivateApiserver` is a second ``kube-apiserver`` process (the binary, PKI and etcd
  of ``infra/kube/kube.sh``) on a port of its own: two API servers on one etcd is how an
  HA control plane runs, so the shared one keeps serving while this one is restarted, and
  the restarted one comes back on the same etcd data. Its flags mirror kube.sh's
  ``start_apiserver``; its kubeconfig is the admin one pointed at its port.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from borgctl.paths import cache_dir, state_dir
from loadtests.procs import ROOT, free_port
from services.runtime.kafka_security import kafka_client_options

KAFKA_SH = ROOT / "infra" / "kafka" / "kafka.sh"
KUBE_SH = ROOT / "infra" / "kube" / "kube.sh"
ETCD_URL = "http://127.0.0.1:2379"


class StackError(Exception):
    """A private broker or API server could not be started or stopped."""


@dataclass
class PrivateBroker:
    state: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    heap: str = "512m"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"BORG_STATE": str(self.state), "KAFKA_PORT": str(self.port),
                    "KAFKA_CONTROLLER_PORT": str(self.controller_port), "KAFKA_HEAP": self.heap})
        env.pop("KAFKA_DATA_DIR", None)  # the data lives under this broker's BORG_STATE
        return env

    def _run(self, command: str, timeout_s: float) -> str:
        try:
            done = subprocess.run(["bash", str(KAFKA_SH), command], env=self.env(), capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise StackError(f"kafka.sh {command} (port {self.port}) took over {timeout_s:.0f}s") from None
        if done.returncode != 0:
            raise StackError(f"kafka.sh {command} (port {self.port}) failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self, timeout_s: float = 150.0) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self._run("start", timeout_s)

    def stop(self, timeout_s: float = 60.0) -> None:
        self._run("stop", timeout_s)

    def pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.state / "kafka" / "kafka.pid").read_text().strip())
            os.kill(pid, 0)
            return pid
        return None

    async def wait_serving(self, timeout_s: float = 60.0) -> float:
        """Seconds until the broker serves metadata with a leader for a fresh topic (a restarted
        broker answers on its port before it leads its partitions again)."""
        import uuid

        from aiokafka import AIOKafkaProducer

        started = time.monotonic()
        topic = f"chaos-probe-{uuid.uuid4().hex[:8]}"
        last = ""
        while time.monotonic() - started < timeout_s:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, **kafka_client_options(),
                                        request_timeout_ms=5000)
            try:
                await producer.start()
                await producer.send_and_wait(topic, b"probe")
                return time.monotonic() - started
            except Exception as exc:  # not serving yet: retry until the deadline
                last = f"{type(exc).__name__}: {exc}"
            finally:
                with contextlib.suppress(Exception):
                    await producer.stop()
        raise StackError(f"broker {self.bootstrap} not serving within {timeout_s:.0f}s ({last})")


def kube_version() -> str:
    text = (ROOT / "infra" / "kube" / "go.mod").read_text()
    match = re.search(r"k8s\.io/kubernetes (v[0-9][^\s]*)", text)
    if match is None:
        raise StackError("cannot read the pinned k8s.io/kubernetes version from infra/kube/go.mod")
    return match.group(1)


@dataclass
class PrivateApiserver:
    state: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def kstate(self) -> Path:
        return state_dir() / "kube"

    @property
    def pki(self) -> Path:
        return self.kstate / "pki"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    def binary(self) -> Path:
        return cache_dir() / "bin" / f"kube-apiserver-{kube_version()}"

    def check_prerequisites(self) -> None:
        admin = self.kstate / "admin.kubeconfig"
        if not self.binary().exists() or not admin.exists():
            raise StackError(f"no local control plane ({self.binary()} / {admin} missing): "
                             "run `bash infra/kube/kube.sh start` first")
        try:
            with urllib.request.urlopen(f"{ETCD_URL}/health", timeout=3) as resp:
                healthy = b'"health":"true"' in resp.read()
        except (OSError, urllib.error.URLError):
            healthy = False
        if not healthy:
            raise StackError(f"etcd is not healthy at {ETCD_URL}: run `bash infra/kube/kube.sh start` first")

    def write_kubeconfig(self) -> Path:
        admin = (self.kstate / "admin.kubeconfig").read_text()
        self.state.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(admin.replace("https://127.0.0.1:6443", self.url))
        self.kubeconfig.chmod(0o600)
        return self.kubeconfig

    def args(self) -> list[str]:
        pki = self.pki
        return [
            str(self.binary()),
            "--etcd-servers", ETCD_URL,
            "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.port),
            "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--disable-admission-plugins", "TaintNodesByCondition",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-cluster-ip-range", "10.96.0.0/12",
            "--requestheader-client-ca-file", str(pki / "front-proxy-ca.crt"),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", str(pki / "front-proxy-client.crt"),
            "--proxy-client-key-file", str(pki / "front-proxy-client.key"),
            "--endpoint-reconciler-type", "none",
            "--allow-privileged=true",
            "--profiling=false",
        ]

    def healthy(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=3, context=ctx) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout_s: float = 120.0) -> float:
        """Start (or start again, same port and etcd) and wait for /readyz; seconds it took."""
        self.check_prerequisites()
        self.write_kubeconfig()
        log = self.state / "kube-apiserver.log"
        started = time.monotonic()
        with log.open("ab") as out:
            out.write(f"\n==== start {time.strftime('%Y-%m-%dT%H:%M:%S')} port {self.port}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.args(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        while not self.healthy():
            if self.proc.poll() is not None:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise StackError(f"private kube-apiserver exited with {self.proc.returncode}:\n{tail}")
            if time.monotonic() - started > timeout_s:
                raise StackError(f"private kube-apiserver not ready at {self.url} within {timeout_s:.0f}s ({log})")
            time.sleep(0.5)
        return time.monotonic() - started

    def stop(self, timeout_s: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
