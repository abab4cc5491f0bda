"""`borgctl bench pipeline` stopped by SIGTERM (a CI timeout, `kill`) cleans up as Ctrl-C does."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import broker_topics, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


async def _bench_topics(bootstrap: str) -> set[str]:
    return {t for t in await broker_topics(bootstrap) if t.startswith("bench") and not t.startswith("bench-")}


@pytest.mark.timeout(240)
def test_sigterm_stops_the_services_and_deletes_the_topics(kafka_bootstrap: str, tmp_path: Path) -> None:
    before = asyncio.run(_bench_topics(kafka_bootstrap))
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "BENCH_PIPELINE_STEPS": "300",
           "BENCH_PIPELINE_STEP_S": "120", "PYTHONPATH": str(ROOT)}
    bench = subprocess.Popen([sys.executable, "-m", "borgctl.main", "bench", "pipeline", "--no-reference",
                              "--out", str(tmp_path / "out.json")], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                             text=True)
    assert bench.stderr is not None
    seen = []
    try:
        for line in bench.stderr:  # the services are ready once the first step starts
            seen.append(line)
            if "nodes at 1 Hz" in line:
                break
        else:
            pytest.fail("bench pipeline ended before its first step:\n" + "".join(seen))
        time.sleep(3)
        children = psutil.Process(bench.pid).children(recursive=True)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        assert "services.features" in names and "services.regime" in names, names
        started = asyncio.run(_bench_topics(kafka_bootstrap)) - before
        assert any(t.endswith("nodestate.v1") for t in started), started
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(90) == 130
    finally:
        if bench.poll() is None:
            bench.kill()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[' '.join(p.cmdline()) for p in alive]}"

    async def deleted() -> bool:
        return not (await _bench_topics(kafka_bootstrap)) & started

    # the broker deletes topics asynchronously: the bench asked for it before exiting, and its metadata
    # can list a deleted topic for a moment after (a CI run saw that)
    asyncio.run(wait_until(deleted, timeout=30, interval=0.5, what="the bench's topics deleted"))
    assert not (tmp_path / "out.json").exists()  # an interrupted run writes no results
