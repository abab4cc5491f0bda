"""docker-compose.yml started for real: `scripts/compose-smoke.sh` (podman + Docker Compose v2) brings
the stack up, waits for every container to be healthy, replays synthetic load, checks a decision
with its proposals, the referee's ActionResult, the decision's trace in the containerised Jaeger and
the dashboard page, then `down -v` leaves nothing behind. Skipped, with the reason, where podman
cannot run containers (not root, not Linux, no apt-get); docs/deploy.md "The compose smoke"."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.compose, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compose-smoke.sh"


def _podman_can_run() -> str | None:
    """None when the smoke can run here, else why not (printed as the skip reason)."""
    if os.environ.get("BORG_SKIP_COMPOSE_SMOKE"):
        return "BORG_SKIP_COMPOSE_SMOKE is set"
    probe = subprocess.run(["bash", str(SCRIPT), "--check"], capture_output=True, text=True, check=False, timeout=600)
    if probe.returncode != 0:
        return f"podman cannot run containers here: {(probe.stdout + probe.stderr).strip() or 'no reason given'}"
    return None


@pytest.mark.timeout(1800)
def test_compose_stack_decides_traces_and_leaves_nothing_behind() -> None:
    reason = _podman_can_run()
    if reason is not None:
        pytest.skip(reason)
    run = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, check=False, timeout=1700)
    output = run.stdout + run.stderr
    print(output)
    assert run.returncode == 0, f"compose smoke failed:\n{output[-6000:]}"
    seen = re.search(r"^decision id seen: (\S+)$", run.stdout, re.MULTILINE)
    assert seen is not None, f"no decision id in the smoke's output:\n{output[-3000:]}"
    assert "nothing left (containers, networks, volumes)" in run.stdout
