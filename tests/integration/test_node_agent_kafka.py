"""The node agent against the real broker: in-process and as the `serve node-agent` process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from contracts import NodeState, decode
from contracts.headers import header
from featurelib.pod import LLC_OCCUPANCY, MBM_TOTAL_BYTES, NODE_LLC_BYTES, NODE_MEMBW_PEAK
from services.node_agent.main import build_agent
from services.node_agent.publish import partition_for
from services.node_agent.resctrl import group_name, llc_bytes
from services.node_agent.settings import NodeAgentSettings
from tests.conftest import ROOT, wait_until
from tests.kafka_helpers import consume

pytestmark = pytest.mark.integration


async def test_live_agent_publishes_keyed_valid_nodestate(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("BORG_TOPIC_PREFIX", topic_prefix)
    monkeypatch.setenv("NODE_AGENT_NODE", "it-node-1")
    monkeypatch.setenv("NODE_AGENT_INTERVAL_S", "0.1")
    monkeypatch.setenv("NODE_AGENT_SPOOL_DIR", str(tmp_path / "spool"))
    agent = build_agent(NodeAgentSettings())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await wait_until(lambda: agent.shipper.delivered >= 5, timeout=30, what="5 NodeState delivered")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
    records = await consume(kafka_bootstrap, f"{topic_prefix}nodestate.v1", agent.shipper.delivered)
    states = [decode(NodeState, r.value) for r in records]
    assert {r.key for r in records} == {b"it-node-1"}
    assert {r.partition for r in records} == {partition_for(b"it-node-1", 6)}  # Kafka's default partitioner
    assert all(header(r.headers, "schema") == "nodestate.v1" for r in records)
    seqs = [s.seq for s in states]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert all(s.counters["task-clock"].value is not None for s in states)
    assert states[0].source in ("software", "perf_event")


async def test_live_agent_sends_each_pods_resctrl_readings_and_the_nodes_scales(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resctrl tree laid out as the kernel's (this VM has no monitoring): the agent makes the pod's group and moves
    its threads in; the test, standing in for the kernel, fills the group's readings; they reach the broker inside
    the pod's cgroup counters, the node's LLC size and stated bandwidth in its metrics."""
    pod = "kubepods/burstable/pod0f6c1a2b-1234-4abc-9def-0123456789ab"
    container = tmp_path / "cgroup" / pod / "cri-containerd-1"
    container.mkdir(parents=True)
    (container / "cgroup.threads").write_text("4242\n4243\n")
    resctrl = tmp_path / "resctrl"
    (resctrl / "info" / "L3_MON").mkdir(parents=True)
    (resctrl / "info" / "L3_MON" / "mon_features").write_text("llc_occupancy\nmbm_total_bytes\n")
    (resctrl / "mon_groups").mkdir()
    for name, value in (("NODE", "it-node-rdt"), ("INTERVAL_S", "0.1"), ("SPOOL_DIR", str(tmp_path / "spool")),
                        ("CGROUP_ROOT", str(tmp_path / "cgroup")), ("CGROUP_DEPTH", "3"),
                        ("RESCTRL_ROOT", str(resctrl)), ("MEMBW_PEAK_GBPS", "20")):
        monkeypatch.setenv(f"NODE_AGENT_{name}", value)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("BORG_TOPIC_PREFIX", topic_prefix)
    group = resctrl / "mon_groups" / group_name(pod)
    agent = build_agent(NodeAgentSettings())
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await wait_until(lambda: (group / "tasks").exists(), timeout=30, what="the pod's monitoring group")
        domain = group / "mon_data" / "mon_L3_00"
        domain.mkdir(parents=True)
        (domain / "llc_occupancy").write_text("4096\n")
        (domain / "mbm_total_bytes").write_text("1000\n")
        await wait_until(lambda: agent.shipper.delivered >= 8, timeout=30, what="8 NodeState delivered")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
    assert sorted(int(t) for t in (group / "tasks").read_text().split()) == [4242, 4243]
    records = await consume(kafka_bootstrap, f"{topic_prefix}nodestate.v1", agent.shipper.delivered)
    states = [decode(NodeState, r.value) for r in records]
    read = [s.cgroups[pod] for s in states if pod in s.cgroups and s.cgroups[pod][LLC_OCCUPANCY].value is not None]
    assert read, [s.cgroups for s in states]
    assert {c[LLC_OCCUPANCY].value for c in read} == {4096.0}
    # the running total stood still: bytes moved per interval 0, after the first reading that has nothing to subtract
    assert [c[MBM_TOTAL_BYTES].value for c in read][1:] and all(c[MBM_TOTAL_BYTES].value == 0.0 for c in read[1:])
    size = llc_bytes("/sys")
    expected = {NODE_MEMBW_PEAK: 20e9, **({NODE_LLC_BYTES: float(size)} if size is not None else {})}
    assert all(s.metrics == expected for s in states)


async def test_serve_node_agent_process(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP=kafka_bootstrap,
        BORG_TOPIC_PREFIX=topic_prefix,
        NODE_AGENT_NODE="it-node-2",
        NODE_AGENT_INTERVAL_S="0.2",
        NODE_AGENT_SPOOL_DIR=str(tmp_path / "spool"),
        LOG_FORMAT="text",
        PYTHONPATH=str(ROOT),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.node_agent",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        records = await consume(kafka_bootstrap, f"{topic_prefix}nodestate.v1", 3, timeout=40)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
        except TimeoutError:
            proc.kill()
            _, err = await proc.communicate()
    stderr = err.decode(errors="replace")
    assert proc.returncode == 0, stderr[-2000:]
    for record in records:
        state = decode(NodeState, record.value)
        assert state.node == "it-node-2"
        assert header(record.headers, "traceparent") is not None  # each sample is a span
    if states_are_software := decode(NodeState, records[0].value).pmu == "software":
        assert stderr.count("no hardware PMU available") == 1  # said once, kept working
    assert states_are_software or "perf_event: counting" in stderr
