"""Keep one local-stack service running: restart it with backoff when it crashes.

    python -m borgctl.supervise <service> [-- COMMAND...]

`borgctl up` starts one supervisor per service (detached, its own process group); the
supervisor runs ``borgctl serve <service>`` (or COMMAND) as its child in that group, so
``killpg`` on the supervisor's pid stops both. The child is restarted when it exits non-zero
or is killed, after an exponential backoff with jitter; exit 0 (it was asked to stop) and
exit 2 (bad configuration: it would fail the same way again) end supervision. SIGTERM or
SIGINT is forwarded to the child, which gets ``KILL_AFTER_S`` to finish before SIGKILL.

State for `borgctl status` goes to ``$BORG_STATE/services/<service>.status.json``: the
child's pid, restarts, last exit code or signal, last error line of the service log and
the time of the last start. The child's output is appended to ``<service>.log``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from borgctl.paths import PROJECT_ROOT, state_dir

LOGGER = "borgctl.supervise"
KILL_AFTER_S = 30
"""After forwarding SIGTERM: a service's own grace is SHUTDOWN_GRACE_S (10 s default)."""
EXIT_CONFIG = 2
"""Settings errors and refused models exit 2 (services/runtime/settings.py, service.py)."""
ERROR_LEVELS = frozenset({"error", "critical"})
TAIL_BYTES = 256 * 1024
MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class Backoff:
    """Restart delays: ``base_s`` doubling per consecutive crash up to ``cap_s``, minus up to
    ``jitter`` of it (so services that crashed together, e.g. on a broker outage, do not restart in
    lock-step). A child that stayed up ``reset_after_s`` starts the schedule over."""

    base_s: float = 1.0
    cap_s: float = 30.0
    jitter: float = 0.2
    reset_after_s: float = 60.0

    def delay(self, failures: int, rand: float) -> float:
        """Delay before restart number ``failures`` (1-based) of a run of crashes; ``rand`` in [0, 1)."""
        exponent = min(max(failures, 1) - 1, 32)  # bounded: 2**32 s is already far past any cap
        full = min(self.cap_s, self.base_s * 2.0**exponent)
        return full * (1.0 - self.jitter * rand)

    def failures_after(self, failures: int, uptime_s: float) -> int:
        """The consecutive-crash count after a crash that followed ``uptime_s`` of running."""
        return 1 if uptime_s >= self.reset_after_s else failures + 1


def last_error_line(lines: Iterable[str]) -> str | None:
    """The error a service log ends with: the final line of the last plain-text traceback (an uncaught
    exception, what ended the process), else the last JSON record at level error/critical (its first
    line, with the last line of its exception). One line, at most MAX_ERROR_CHARS."""
    last_traceback: str | None = None
    last_record: str | None = None
    in_traceback = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        record = _json_record(line)
        if record is not None:
            in_traceback = False
            if record.get("logger") == LOGGER or str(record.get("level", "")).lower() not in ERROR_LEVELS:
                continue
            message = _first_line(str(record.get("msg", "")))
            exc = record.get("exc")
            if isinstance(exc, str) and exc.strip():
                message = f"{message}: {exc.strip().splitlines()[-1].strip()}"
            last_record = message
        elif line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and not line.startswith((" ", "\t")):
            # "ValueError: boom"; for chained exceptions the final one overwrites the earlier ones
            last_traceback = line.strip()
    last = last_traceback or last_record
    return None if last is None else last[:MAX_ERROR_CHARS]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _json_record(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def log_tail(path: Path, since: int) -> list[str]:
    """Lines written to ``path`` from byte ``since`` on (at most the last TAIL_BYTES of them)."""
    try:
        size = path.stat().st_size
        start = max(since, size - TAIL_BYTES)
        with path.open("rb") as handle:
            handle.seek(start)
            data = handle.read(size - start)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if start > since and lines else lines  # the first line may be cut


def describe_exit(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        return {"code": None, "signal": signal.Signals(-returncode).name}
    return {"code": returncode, "signal": None}


def exit_text(last_exit: dict[str, Any] | None) -> str:
    """'code 1' or 'signal SIGKILL' (or '-' before any exit)."""
    if not last_exit:
        return "-"
    return f"signal {last_exit['signal']}" if last_exit.get("signal") else f"code {last_exit.get('code')}"


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status_path(name: str) -> Path:
    return state_dir() / "services" / f"{name}.status.json"


def read_status(name: str) -> dict[str, Any] | None:
    try:
        value = json.loads(status_path(name).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the supervisor dies (even by SIGKILL), so no orphan
    service outlives its supervisor."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)


class Supervisor:
    def __init__(
        self,
        name: str,
        command: list[str],
        log: Path,
        status: Path,
        backoff: Backoff = Backoff(),
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.name = name
        self.command = command
        self.log = log
        self.status = status
        self.backoff = backoff
        self.rand = rand
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self._wake = threading.Event()
        self._state: dict[str, Any] = {
            "service": name,
            "supervisor_pid": os.getpid(),
            "state": "starting",
            "pid": None,
            "restarts": 0,
            "started_at": None,
            "last_exit": None,
            "last_error": None,
            "restart_in_s": None,
        }

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_kill_deadline)
        failures = 0
        while not self.stopping:
            returncode, uptime_s = self._run_child()
            if self.stopping:
                break
            if returncode == 0 or returncode == EXIT_CONFIG:
                self._write(state="exited" if returncode == 0 else "failed", pid=None)
                self._say("info" if returncode == 0 else "error", f"exited with code {returncode}; not restarted")
                return returncode
            failures = self.backoff.failures_after(failures, uptime_s)
            delay = self.backoff.delay(failures, self.rand())
            self._write(state="backoff", pid=None, restart_in_s=round(delay, 2))
            how = exit_text(self._state["last_exit"])
            self._say("warning", f"exited ({how}) after {uptime_s:.1f}s; restart in {delay:.1f}s")
            self._wake.wait(delay)  # a stop request sets it
            if not self.stopping:
                self._state["restarts"] += 1
        self._write(state="stopped", pid=None, restart_in_s=None)
        return 0

    def _run_child(self) -> tuple[int, float]:
        with self.log.open("ab") as out:
            offset = out.tell()
            started = time.monotonic()
            self.child = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=PROJECT_ROOT,
                preexec_fn=_die_with_parent,  # safe: the supervisor runs no threads
            )
        if self.stopping:  # a stop request raced the start
            self.child.terminate()
        self._write(state="running", pid=self.child.pid, started_at=_utc_now(), restart_in_s=None)
        returncode = self.child.wait()
        uptime_s = time.monotonic() - started
        signal.alarm(0)
        self.child = None
        error = last_error_line(log_tail(self.log, offset)) if returncode != 0 else None
        self._state["last_exit"] = {**describe_exit(returncode), "at": _utc_now()}
        if error is not None:
            self._state["last_error"] = error
        return returncode, uptime_s

    def _on_stop(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        self._wake.set()
        child = self.child
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)
            signal.alarm(KILL_AFTER_S)

    def _on_kill_deadline(self, _signum: int, _frame: FrameType | None) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)

    def _write(self, **changes: Any) -> None:
        self._state.update(changes)
        tmp = self.status.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=1) + "\n")
        os.replace(tmp, self.status)  # readers never see half a file

    def _say(self, level: str, message: str) -> None:
        """One JSON line in the service log, in the services' shape (skipped by last_error_line)."""
        line = {"ts": _utc_now(), "level": level, "service": self.name, "logger": LOGGER, "msg": message}
        with self.log.open("a") as out:
            out.write(json.dumps(line) + "\n")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    command = rest[1:] if rest[:1] == ["--"] else [sys.executable, "-m", "borgctl.main", "serve", name]
    if not command:
        print("borgctl.supervise: nothing to run after --", file=sys.stderr)
        return 2
    services = state_dir() / "services"
    services.mkdir(parents=True, exist_ok=True)
    return Supervisor(name, command, services / f"{name}.log", status_path(name)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
