"""`borgctl load chaos --quick`: under steady load every service is SIGKILLed, the broker and the
kube-apiserver restarted, in turn; nothing is lost, nothing applied twice, every fault recovers.

The run restarts only what it owns: a private broker (infra/kafka/kafka.sh with its own
BORG_STATE and ports) and a second kube-apiserver on the local control plane's etcd
(loadtests/private_stack.py). It runs near the end of the suite (file name) because it is
the longest test and loads the machine for a few minutes.
"""

# ruff: noqa: F811 (pytest fixtures imported from test_referee_helpers are test parameters here)

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadtests.procs import PIPELINE
from tests.conftest import ROOT
from tests.integration.test_referee_helpers import kube_admin  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.slow]

CASES = [*(f"chaos:kill:{s}" for s in (*PIPELINE, "cluster-watcher")), "chaos:restart:kafka",
         "chaos:restart:kube-apiserver"]


@pytest.mark.timeout(660)
def test_quick_chaos_loses_nothing_applies_nothing_twice_and_recovers(
    kafka_bootstrap: str, kube_admin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "chaos"
    done = subprocess.run(
        # the smallest session timeout the settings accept: a killed member's partitions move ~4 s
        # sooner, eight kills in a row (the default, 10 s, is what production runs)
        [sys.executable, "-m", "borgctl.main", "load", "chaos", "--quick", "--out", str(out),
         "--env", "STREAM_SESSION_TIMEOUT_S=6"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    said = f"\n--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert (out / "results.json").exists(), said
    rows = orjson.loads((out / "results.json").read_bytes())["results"]
    metrics: dict[str, dict[str, float | None]] = {}
    for r in rows:
        metrics.setdefault(r["case"], {})[r["metric"]] = r["value"]
    assert [c for c in CASES if c not in metrics] == [], said
    for case in CASES:
        got = metrics[case]
        assert got["lost"] == 0, f"{case}: lost {got['lost']}{said}"
        assert got["duplicate_actions"] == 0, f"{case}: duplicate actions{said}"
        recovery = got["recovery_s"]
        assert recovery is not None and math.isfinite(recovery) and 0 <= recovery <= 60, f"{case}: {recovery}{said}"
    assert metrics["chaos:total"]["lost"] == 0 and metrics["chaos:total"]["duplicate_actions"] == 0, said
    # the load really ran and was really accounted for, and the referee really wrote to the API
    assert (metrics["chaos:accounting"]["produced"] or 0) >= 250 * 60, said
    assert (metrics.get("chaos:actions", {}).get("applied") or 0) > 0, said
    assert (out / "timeline.png").stat().st_size > 10_000
    assert done.returncode == 0, said
