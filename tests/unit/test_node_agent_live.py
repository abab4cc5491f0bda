"""Live sampling through perf_event_open on this machine, PMU discovery on fake sysfs trees, per-cgroup counts."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import NodeState
from services.node_agent import discovery
from services.node_agent import perf_event as pe
from services.node_agent.events import HARDWARE_EVENTS
from services.node_agent.live import LiveSampler
from services.node_agent.nodestate import nodestate_dict


def _state(sampler: LiveSampler) -> NodeState:
    s = sampler.sample()
    return NodeState.model_validate(
        nodestate_dict(
            node="here",
            ts_ms=1_700_000_000_000,
            seq=0,
            interval_ms=100,
            source=sampler.source,
            pmu=sampler.pmu,
            supported_events=s.supported_events,
            counters=s.counters,
            cpu_util=s.cpu_util,
            mem_util=s.mem_util,
            cpu_freq_mhz=s.cpu_freq_mhz,
            cgroups=s.cgroups or None,
        )
    )


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(not pe.available(), reason="no perf_event_open on this platform")
def test_live_sampler_on_this_machine(caplog: pytest.LogCaptureFixture) -> None:
    sampler = LiveSampler()
    with caplog.at_level(logging.INFO, logger="services.node_agent.live"):
        sampler.open()
    try:
        _busy(0.05)
        first = _state(sampler)
        _busy(0.05)
        second = _state(sampler)
    finally:
        sampler.close()
    hardware = [e for e in HARDWARE_EVENTS if e in first.counters and e != "bus-cycles"]
    if sampler.pmu == "software":
        # The VM exposes no PMU: said once, software events still counted, hardware marked, never invented.
        notes = [r for r in caplog.records if "no hardware PMU" in r.message]
        assert len(notes) == 1
        assert all(first.counters[e].status == "not_supported" and first.counters[e].value is None for e in hardware)
        assert first.source == "software"
    else:
        assert first.source == "perf_event"
    for state in (first, second):
        tc = state.counters["task-clock"]
        assert tc.status in ("counted", "multiplexed")
        assert tc.value is not None
        assert tc.value > 0
        assert "task-clock" in state.supported_events
        assert state.counters["context-switches"].value is not None
        assert 0.0 <= state.cpu_util <= 1.0
        assert 0.0 < state.mem_util < 1.0
    assert second.counters["task-clock"].enabled_ns > 0


def test_no_perf_event_still_samples(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(pe, "available", lambda: False)
    sampler = LiveSampler()
    with caplog.at_level(logging.WARNING):
        sampler.open()
    state = _state(sampler)
    sampler.close()
    assert state.supported_events == []
    assert all(c.status == "not_supported" and c.value is None for c in state.counters.values())
    assert state.pmu == "software"
    assert sum("no hardware PMU" in r.message for r in caplog.records) == 1


# ------------------------------------------------------------------ discovery on fake sysfs trees
def _pmu(
    root: Path,
    name: str,
    type_: int,
    *,
    events: dict[str, str] | None = None,
    formats: dict[str, str] | None = None,
    cpus: str | None = None,
    extra: dict[str, str] | None = None,
) -> None:
    base = root / "bus/event_source/devices" / name
    (base / "events").mkdir(parents=True)
    (base / "format").mkdir()
    (base / "type").write_text(f"{type_}\n")
    for ev, text in (events or {}).items():
        (base / "events" / ev).write_text(text + "\n")
    for ev, text in (extra or {}).items():
        (base / "events" / ev).write_text(text + "\n")
    for term, text in (formats or {}).items():
        (base / "format" / term).write_text(text + "\n")
    if cpus:
        (base / "cpus").write_text(cpus + "\n")


@pytest.fixture
def spr_sysfs(tmp_path: Path) -> Path:
    _pmu(
        tmp_path,
        "cpu",
        4,
        events={"cpu-cycles": "event=0x3c", "instructions": "event=0xc0"},
        formats={"event": "config:0-7", "umask": "config:8-15", "cmask": "config:24-31", "edge": "config:18"},
    )
    for i in (0, 1):
        _pmu(
            tmp_path,
            f"uncore_imc_{i}",
            30 + i,
            events={"cas_count_read": "event=0x05,umask=0xcf", "cas_count_write": "event=0x05,umask=0xf0"},
            extra={
                "cas_count_read.scale": "6.103515625e-5",
                "cas_count_read.unit": "MiB",
                "cas_count_write.scale": "6.103515625e-5",
                "cas_count_write.unit": "MiB",
            },
            formats={"event": "config:0-7", "umask": "config:8-15"},
            cpus="0",
        )
    _pmu(tmp_path, "software", 1)
    return tmp_path


def test_discovery_of_a_server_pmu(spr_sysfs: Path) -> None:
    pmus = discovery.discover(str(spr_sysfs))
    assert set(pmus) == {"cpu", "uncore_imc_0", "uncore_imc_1", "software"}
    assert discovery.has_hardware_pmu(pmus)
    (spec,) = discovery.resolve("cpu/event=0x3c,umask=0x1,edge/", pmus)
    assert (spec.type, spec.config) == (4, 0x3C | (0x1 << 8) | (1 << 18))
    (named,) = discovery.resolve("cpu/instructions/", pmus)
    assert named.config == 0xC0
    (raw,) = discovery.resolve("r0280:u", pmus)
    assert (raw.type, raw.config, raw.exclude_kernel, raw.exclude_user) == (pe.TYPE_RAW, 0x0280, True, False)
    (generic,) = discovery.resolve("LLC-load-misses", pmus)
    assert generic.type == pe.TYPE_HW_CACHE
    assert generic.config == 2 | (1 << 16)
    imc = discovery.imc_bandwidth_events(pmus)
    assert imc == [
        "uncore_imc_0/cas_count_read/",
        "uncore_imc_0/cas_count_write/",
        "uncore_imc_1/cas_count_read/",
        "uncore_imc_1/cas_count_write/",
    ]
    (cas,) = discovery.resolve(imc[0], pmus)
    assert cas.scale == pytest.approx(64.0)  # one CAS = one 64-byte line
    assert cas.cpus == (0,)
    assert cas.type == 30
    assert cas.config == 0x05 | (0xCF << 8)
    with pytest.raises(discovery.UnknownEventError):
        discovery.resolve("cpu/nonexistent/", pmus)
    with pytest.raises(discovery.UnknownEventError):
        discovery.resolve("uncore_cha/x/", pmus)


def test_hybrid_generic_events_open_once_per_core_pmu(tmp_path: Path) -> None:
    _pmu(tmp_path, "cpu_core", 4, cpus="0-15", formats={"event": "config:0-7"})
    _pmu(tmp_path, "cpu_atom", 10, cpus="16-23", formats={"event": "config:0-7"})
    pmus = discovery.discover(str(tmp_path))
    specs = discovery.resolve("cycles", pmus)
    assert {(s.name, s.config >> 32, s.cpus[0] if s.cpus else None) for s in specs} == {
        ("cpu_core/cycles/", 4, 0),
        ("cpu_atom/cycles/", 10, 16),
    }
    raw = discovery.resolve("r0280", pmus)
    assert {(s.type, s.config) for s in raw} == {(4, 0x0280), (10, 0x0280)}
    (sw,) = discovery.resolve("task-clock", pmus)
    assert sw.type == pe.TYPE_SOFTWARE


def test_cgroup_dirs(tmp_path: Path) -> None:
    for rel in ("kubepods/burstable/pod1/c1", "kubepods/besteffort/pod2", "system.slice"):
        (tmp_path / rel).mkdir(parents=True)
    assert discovery.cgroup_dirs(str(tmp_path), 2, 10) == [
        "kubepods",
        "kubepods/besteffort",
        "kubepods/burstable",
        "system.slice",
    ]
    assert discovery.cgroup_dirs(str(tmp_path), 3, 3) == ["kubepods", "kubepods/besteffort", "kubepods/besteffort/pod2"]


# ------------------------------------------------------------------ per-cgroup counting, for real
def _cgroup2_root() -> Path | None:
    for candidate in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists():
            return candidate
    return None


@pytest.fixture
def pod_cgroup() -> Iterator[tuple[Path, str]]:
    root = _cgroup2_root()
    if root is None or not os.access(root, os.W_OK) or not pe.available():
        pytest.skip("needs a writable cgroup v2 hierarchy and perf_event_open (root)")
    parent = root / f"borg-test-{uuid.uuid4().hex[:8]}"
    pod = parent / "pod-a"
    try:
        pod.mkdir(parents=True)
    except OSError as exc:
        pytest.skip(f"cannot create cgroups here: {exc}")
    try:
        yield parent, "pod-a"
    finally:
        for group in (pod, parent):
            try:
                for pid in (group / "cgroup.procs").read_text().split():
                    (root / "cgroup.procs").write_text(pid)
            except OSError:
                pass
            try:
                group.rmdir()
            except OSError:
                pass


def test_per_cgroup_counters(pod_cgroup: tuple[Path, str]) -> None:
    parent, name = pod_cgroup
    sampler = LiveSampler(cgroup_root=str(parent), cgroup_depth=1, cgroup_events=["task-clock", "context-switches"])
    sampler.open()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<0.4: pass"])
    try:
        (parent / name / "cgroup.procs").write_text(str(busy.pid))
        busy.wait(timeout=10)
        state = _state(sampler)
    finally:
        busy.kill()
        sampler.close()
    counters = state.cgroups[name]
    if counters["task-clock"].status == "not_supported":
        pytest.skip("kernel without perf cgroup support")
    assert counters["task-clock"].value is not None
    assert counters["task-clock"].value > 50e6
