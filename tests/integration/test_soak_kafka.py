"""`borgctl load soak` on the real broker: a short, low-rate soak loses nothing."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadtests.procs import select_services
from tests.integration.test_scenario_ramp import run_load

pytestmark = pytest.mark.integration
SOAK_S = 15
"""The soak proper: every NodeState of it must be accounted for (warm-up, flush and drain come on top)."""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_short_soak_accounts_for_every_nodestate(kafka_bootstrap: str, tmp_path: Path) -> None:
    if "features" not in select_services("stream"):
        pytest.skip("no features service in this build: nothing to account against")
    out = tmp_path / "soak"
    done = run_load(
        ["soak", "--rate", "200", "--minutes", str(SOAK_S / 60), "--warmup", "4", "--out", str(out),
         "--services", "stream", "--bootstrap", kafka_bootstrap, "--max-lost", "0", "--ready-timeout", "60"],
        timeout=140,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    accounting = orjson.loads((out / "accounting.json").read_bytes())
    assert accounting["produced"] >= 200 * SOAK_S
    assert accounting["lost"] == 0
    assert accounting["unexpected"] == 0
    rows = orjson.loads((out / "results.json").read_bytes())["results"]
    lost = [r for r in rows if r["case"] == "soak:accounting" and r["metric"] == "lost"]
    assert lost == [{"bench": "pipeline", "case": "soak:accounting", "metric": "lost", "value": 0.0,
                     "unit": "messages", "offered": 200.0}]
    assert any(r["metric"] == "rss_slope" and r["case"] == "soak:proc:features" for r in rows)
