"""The node agent's resctrl reader on a resctrl tree laid out as the kernel lays it out (files written here stand
in for the kernel's: it makes a group's ``mon_data`` and moves the threads written to ``tasks``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from featurelib.pod import LLC_OCCUPANCY, MBM_TOTAL_BYTES, NODE_LLC_BYTES, NODE_MEMBW_PEAK
from services.node_agent.live import LiveSampler
from services.node_agent.resctrl import (
    ResctrlMonitor,
    ResctrlUnavailableError,
    group_name,
    llc_bytes,
)
from services.node_agent.settings import NodeAgentSettings

POD_A = "kubepods/burstable/pod0f6c1a2b-1234-4abc-9def-0123456789ab"
POD_B = "kubepods/besteffort/pod1a2b3c4d-0000-4abc-9def-0123456789ab"


@pytest.fixture(autouse=True)
def kernel_rmdir(monkeypatch: pytest.MonkeyPatch) -> None:
    """rmdir of a monitoring group removes the files the kernel made in it (here, the test's stand-ins)."""
    real_rmdir = Path.rmdir

    def rmdir(self: Path) -> None:
        if self.parent.name == "mon_groups" and self.is_dir():
            shutil.rmtree(self)
        else:
            real_rmdir(self)

    monkeypatch.setattr(Path, "rmdir", rmdir)


def resctrl_tree(root: Path, features: str = "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n") -> Path:
    (root / "info" / "L3_MON").mkdir(parents=True)
    (root / "info" / "L3_MON" / "mon_features").write_text(features)
    (root / "mon_groups").mkdir()
    return root


def cgroup_tree(root: Path, threads: dict[str, list[int]]) -> Path:
    """Each pod cgroup with one container below it holding the threads (a pod's own cgroup holds none)."""
    for cgroup, tids in threads.items():
        container = root / cgroup / "cri-containerd-1"
        container.mkdir(parents=True, exist_ok=True)
        (root / cgroup / "cgroup.threads").write_text("")
        (container / "cgroup.threads").write_text("".join(f"{t}\n" for t in tids))
    return root


def set_readings(group: Path, occupancy: list[str], total: list[str]) -> None:
    """One value per L3 domain, as the kernel shows them."""
    for i, (occ, mbm) in enumerate(zip(occupancy, total, strict=True)):
        domain = group / "mon_data" / f"mon_L3_{i:02d}"
        domain.mkdir(parents=True, exist_ok=True)
        (domain / "llc_occupancy").write_text(f"{occ}\n")
        (domain / "mbm_total_bytes").write_text(f"{mbm}\n")


def tasks_of(group: Path) -> list[int]:
    return [int(t) for t in (group / "tasks").read_text().split()]


def test_a_group_per_pod_cgroup_holds_its_containers_threads_and_reads_every_domain(tmp_path: Path) -> None:
    resctrl = resctrl_tree(tmp_path / "resctrl")
    cgroups = cgroup_tree(tmp_path / "cgroup", {POD_A: [101, 102], POD_B: [201]})
    stale = resctrl / "mon_groups" / "borg-left-by-a-crash"
    stale.mkdir()
    other = resctrl / "mon_groups" / "someone-elses"
    other.mkdir()
    monitor = ResctrlMonitor(resctrl, cgroups)
    assert monitor.events == (LLC_OCCUPANCY, MBM_TOTAL_BYTES)
    assert not stale.exists() and other.exists()  # only our own leftovers are removed

    monitor.sync([POD_A, POD_B])
    a, b = (resctrl / "mon_groups" / group_name(c) for c in (POD_A, POD_B))
    assert tasks_of(a) == [101, 102] and tasks_of(b) == [201]
    set_readings(a, ["1048576", "524288"], ["1000", "2000"])
    set_readings(b, ["4096", "0"], ["50", "50"])
    first = monitor.read(interval_ns=10**9)
    assert first[POD_A][LLC_OCCUPANCY]["value"] == 1048576 + 524288
    assert first[POD_A][LLC_OCCUPANCY]["status"] == "counted"
    # the running total's first reading has nothing to subtract: no number
    assert first[POD_A][MBM_TOTAL_BYTES]["status"] == "not_counted"
    assert first[POD_A][MBM_TOTAL_BYTES]["value"] is None

    # a new process in pod A: only it is moved; B's totals go on
    (cgroups / POD_A / "cri-containerd-1" / "cgroup.threads").write_text("101\n102\n103\n")
    monitor.sync([POD_A, POD_B])
    assert tasks_of(a) == [101, 102, 103]
    assert monitor.moved_threads == 4
    set_readings(a, ["1048576", "0"], ["5000", "2500"])
    set_readings(b, ["8192", "0"], ["150", "50"])
    second = monitor.read(interval_ns=2 * 10**9)
    assert second[POD_A][MBM_TOTAL_BYTES]["value"] == (5000 + 2500) - (1000 + 2000)
    assert second[POD_A][MBM_TOTAL_BYTES]["enabled_ns"] == 2 * 10**9
    assert second[POD_B][MBM_TOTAL_BYTES]["value"] == 100
    assert second[POD_B][LLC_OCCUPANCY]["value"] == 8192

    # pod B is gone: its group is removed with it
    monitor.sync([POD_A])
    assert not b.exists() and set(monitor.read(10**9)) == {POD_A}
    monitor.close()
    assert not a.exists() and not monitor.groups


def test_a_reading_the_kernel_has_not_got_is_not_counted_and_a_total_that_went_back_has_no_delta(
        tmp_path: Path) -> None:
    resctrl = resctrl_tree(tmp_path / "resctrl")
    monitor = ResctrlMonitor(resctrl, cgroup_tree(tmp_path / "cgroup", {POD_A: [7]}))
    monitor.sync([POD_A])
    group = resctrl / "mon_groups" / group_name(POD_A)
    set_readings(group, ["Unavailable", "10"], ["100", "100"])
    monitor.read(10**9)
    set_readings(group, ["Error", "10"], ["150", "150"])
    got = monitor.read(10**9)[POD_A]
    assert got[LLC_OCCUPANCY]["status"] == "not_counted" and got[LLC_OCCUPANCY]["value"] is None
    assert got[MBM_TOTAL_BYTES]["value"] == 100
    set_readings(group, ["10", "10"], ["1", "1"])  # the running total was reset
    assert monitor.read(10**9)[POD_A][MBM_TOTAL_BYTES]["status"] == "not_counted"
    set_readings(group, ["10", "10"], ["11", "1"])
    assert monitor.read(10**9)[POD_A][MBM_TOTAL_BYTES]["value"] == 10


def test_only_occupancy_when_the_cpu_meters_no_traffic(tmp_path: Path) -> None:
    resctrl = resctrl_tree(tmp_path / "resctrl", features="llc_occupancy\n")
    monitor = ResctrlMonitor(resctrl, cgroup_tree(tmp_path / "cgroup", {POD_A: [7]}))
    monitor.sync([POD_A])
    set_readings(resctrl / "mon_groups" / group_name(POD_A), ["64"], ["0"])
    got = monitor.read(10**9)[POD_A]
    assert set(got) == {LLC_OCCUPANCY} and got[LLC_OCCUPANCY]["value"] == 64
    assert monitor.events == (LLC_OCCUPANCY,)


def test_no_monitoring_is_said_with_what_was_found(tmp_path: Path) -> None:
    with pytest.raises(ResctrlUnavailableError, match=r"mon_features lists nothing.*RDT CMT/MBM or PQoS"):
        ResctrlMonitor(tmp_path / "not-mounted", tmp_path)
    resctrl = resctrl_tree(tmp_path / "resctrl", features="mbm_local_bytes\n")
    with pytest.raises(ResctrlUnavailableError, match=r"mbm_local_bytes"):
        ResctrlMonitor(resctrl, tmp_path)


def test_out_of_monitoring_ids_skips_the_pod_and_keeps_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    resctrl = resctrl_tree(tmp_path / "resctrl")
    monitor = ResctrlMonitor(resctrl, cgroup_tree(tmp_path / "cgroup", {POD_A: [1], POD_B: [2]}))
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self.name == group_name(POD_B):
            raise OSError(28, "No space left on device")
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with caplog.at_level(logging.WARNING):
        monitor.sync([POD_A, POD_B])
        monitor.sync([POD_A, POD_B])
    assert set(monitor.groups) == {POD_A}
    assert caplog.text.count("no monitoring group for " + POD_B) == 1  # not retried every sample
    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    monitor.sync([POD_B])  # A's group went: its id is free again, B is retried
    assert set(monitor.groups) == {POD_B}


def test_llc_size_counts_each_shared_cache_once(tmp_path: Path) -> None:
    cpus = tmp_path / "devices" / "system" / "cpu"
    for cpu, shared, size in ((0, "0-1", "32768K"), (1, "0-1", "32768K"), (2, "2-3", "16M")):
        for index, level, cache_size in ((2, "2", "1024K"), (3, "3", size)):
            d = cpus / f"cpu{cpu}" / "cache" / f"index{index}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "shared_cpu_list").write_text(f"{shared if level == '3' else cpu}\n")
            (d / "size").write_text(f"{cache_size}\n")
    assert llc_bytes(tmp_path) == 32 * 2**20 + 16 * 2**20
    assert llc_bytes(tmp_path / "nothing") is None


def test_the_live_sampler_puts_readings_beside_each_pods_counters(tmp_path: Path) -> None:
    resctrl = resctrl_tree(tmp_path / "resctrl")
    cgroups = cgroup_tree(tmp_path / "cgroup", {POD_A: [1]})
    sysfs = tmp_path / "sys"
    cache = sysfs / "devices" / "system" / "cpu" / "cpu0" / "cache" / "index3"
    cache.mkdir(parents=True)
    (cache / "level").write_text("3\n")
    (cache / "shared_cpu_list").write_text("0\n")
    (cache / "size").write_text("8192K\n")
    (sysfs / "devices" / "system" / "cpu" / "online").write_text("0\n")
    sampler = LiveSampler(sysfs_root=str(sysfs), cgroup_root=str(cgroups), cgroup_depth=3,
                          resctrl_root=str(resctrl), membw_peak_bytes_per_s=20e9, record_freq=False)
    sampler.open()
    try:
        group = resctrl / "mon_groups" / group_name("kubepods/burstable/pod0f6c1a2b-1234-4abc-9def-0123456789ab")
        sampler.sample()
        assert tasks_of(group) == [1]
        set_readings(group, ["4096"], ["0"])
        sample = sampler.sample()
        assert sample.cgroups[POD_A][LLC_OCCUPANCY]["value"] == 4096
        assert sample.metrics == {NODE_LLC_BYTES: 8 * 2**20, NODE_MEMBW_PEAK: 20e9}
        # a group for the pod's cgroup only, not for the kubepods / QoS cgroups above it
        assert [g.name for g in (resctrl / "mon_groups").iterdir()] == [group.name]
    finally:
        sampler.close()
    assert not group.exists()


def test_resctrl_without_a_cgroup_root_fails_at_start_up_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_AGENT_RESCTRL_ROOT", "/sys/fs/resctrl")
    monkeypatch.delenv("NODE_AGENT_CGROUP_ROOT", raising=False)
    with pytest.raises(ValueError, match="NODE_AGENT_RESCTRL_ROOT needs NODE_AGENT_CGROUP_ROOT"):
        NodeAgentSettings()
    monkeypatch.setenv("NODE_AGENT_MEMBW_PEAK_GBPS", "0")
    monkeypatch.setenv("NODE_AGENT_CGROUP_ROOT", "/sys/fs/cgroup")
    with pytest.raises(ValueError, match="membw_peak_gbps"):
        NodeAgentSettings()
