"""Per-pod LLC occupancy and memory traffic from resctrl monitoring groups (Intel RDT CMT/MBM, AMD PQoS).

The counter regressor of the ``pod-pressure`` stage is least sure of exactly the two resources these CPUs meter
per group of tasks (docs/arena.md, "How close do per-pod counters get?"). Linux exposes the meters through the
resctrl filesystem: a directory made under ``mon_groups/`` is a monitoring group, the thread ids written to its
``tasks`` file are counted in it (threads they start later inherit it), and
``mon_data/mon_L3_<domain>/{llc_occupancy,mbm_total_bytes}`` hold each cache domain's reading: bytes of LLC the
group occupies now, and bytes it has moved to and from memory since the group was made.

:class:`ResctrlMonitor` keeps one group per pod cgroup the node agent counts (named ``borg-<hash of the cgroup
path>``: resctrl names cannot hold slashes), moves the cgroup's threads into it before every read (new threads
of an existing process follow by inheritance; new processes must be moved), and reads every domain summed:

* ``llc_occupancy`` — bytes occupied at the sample (a level, not a count);
* ``mbm_total_bytes`` — bytes moved during the interval (the delta of the running total; the first read of a
  group, or a total that went backwards, has no number: ``not_counted``).

Groups are made under the default control group: a thread the runtime put in another control group (an
allocation class, e.g. containerd's RDT class) cannot join them and is left out (logged at debug level). A domain
answering ``Unavailable`` or ``Error`` (the kernel's words for a reading it has not got) makes that
event ``not_counted`` for the sample: numbers are never invented. Groups whose cgroup went away are removed, and
so are ``borg-`` groups a previous run left behind (the kernel keeps them until rmdir).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from featurelib.pod import LLC_OCCUPANCY, MBM_TOTAL_BYTES
from services.node_agent.nodestate import CounterDict, counted, without_number

log = logging.getLogger(__name__)

RESCTRL_EVENTS: Final = (LLC_OCCUPANCY, MBM_TOTAL_BYTES)
GROUP_PREFIX: Final = "borg-"
_UNREADABLE: Final = ("Unavailable", "Error")


class ResctrlUnavailableError(RuntimeError):
    """resctrl is not mounted here, or its CPU cannot monitor LLC occupancy and memory traffic per group."""


def group_name(cgroup: str) -> str:
    """The monitoring group of a cgroup path (relative to the agent's cgroup root)."""
    return GROUP_PREFIX + hashlib.sha256(cgroup.encode()).hexdigest()[:24]


def monitoring_features(root: Path) -> set[str]:
    """What this resctrl mount monitors per group (``info/L3_MON/mon_features``); empty when it cannot."""
    try:
        return set((root / "info" / "L3_MON" / "mon_features").read_text().split())
    except OSError:
        return set()


def _threads(cgroup_dir: Path) -> set[int]:
    """Thread ids in a cgroup and every cgroup below it (a pod's processes live in its containers' cgroups)."""
    found: set[int] = set()
    for current, _dirs, files in os.walk(cgroup_dir):
        name = "cgroup.threads" if "cgroup.threads" in files else "tasks" if "tasks" in files else "cgroup.procs"
        try:
            text = (Path(current) / name).read_text()
        except OSError:
            continue
        found.update(int(t) for t in text.split() if t.isdigit())
    return found


class ResctrlMonitor:
    """One monitoring group per cgroup; ``sync`` then ``read`` every sample, ``close`` at the end."""

    def __init__(self, root: str | Path, cgroup_root: str | Path) -> None:
        self.root = Path(root)
        self.cgroup_root = Path(cgroup_root)
        features = monitoring_features(self.root)
        self.events = tuple(e for e in RESCTRL_EVENTS if e in features)
        if not self.events:
            raise ResctrlUnavailableError(
                f"{self.root}: no LLC occupancy or memory-traffic monitoring "
                f"(info/L3_MON/mon_features lists {sorted(features) or 'nothing'}; is resctrl mounted and does "
                "the CPU have RDT CMT/MBM or PQoS?)"
            )
        self.groups: dict[str, Path] = {}
        self._totals: dict[str, int] = {}
        self._refused: set[str] = set()
        self.moved_threads = 0
        try:
            leftovers = [p for p in self._mon_groups().iterdir() if p.name.startswith(GROUP_PREFIX)]
        except OSError as exc:
            raise ResctrlUnavailableError(f"{self._mon_groups()}: {exc.strerror or exc}") from exc
        self._remove(leftovers)

    def _mon_groups(self) -> Path:
        return self.root / "mon_groups"

    def sync(self, cgroups: Iterable[str]) -> None:
        """Make groups for new cgroups, drop those of gone ones, move every cgroup's threads not yet in its group."""
        wanted = set(cgroups)
        gone = [c for c in self.groups if c not in wanted]
        self._remove(self.groups.pop(c) for c in gone)
        for c in gone:
            self._totals.pop(c, None)
        if gone:  # monitoring ids were freed: the pods refused one may get one now
            self._refused.clear()
        self._refused &= wanted
        for cgroup in sorted(wanted):
            group = self.groups.get(cgroup)
            if group is None:
                if cgroup in self._refused:
                    continue
                group = self._mon_groups() / group_name(cgroup)
                try:
                    group.mkdir(exist_ok=True)
                except OSError as exc:  # ENOSPC: the CPU has run out of monitoring ids (RMIDs)
                    log.warning("resctrl: no monitoring group for %s (%s); retried when another pod's group goes",
                                cgroup, exc.strerror or exc)
                    self._refused.add(cgroup)
                    continue
                self.groups[cgroup] = group
            self._move(group, _threads(self.cgroup_root / cgroup))

    def _move(self, group: Path, threads: set[int]) -> None:
        try:
            present = {int(t) for t in (group / "tasks").read_text().split() if t.isdigit()}
        except OSError:
            present = set()
        for tid in sorted(threads - present):
            try:
                # one id per write(2): the kernel takes the first number of a write only
                with (group / "tasks").open("a") as f:
                    f.write(f"{tid}\n")
                self.moved_threads += 1
            except OSError as exc:
                if exc.errno != errno.ESRCH:  # the thread ended between listing and moving it
                    log.debug("resctrl: cannot move %d into %s: %s", tid, group.name, exc)

    def read(self, interval_ns: int) -> dict[str, dict[str, CounterDict]]:
        """Per cgroup: ``llc_occupancy`` (bytes now) and ``mbm_total_bytes`` (bytes moved this interval)."""
        out: dict[str, dict[str, CounterDict]] = {}
        for cgroup, group in self.groups.items():
            readings: dict[str, CounterDict] = {}
            for event in self.events:
                total = _domain_sum(group, event)
                if event == LLC_OCCUPANCY:
                    readings[event] = (without_number("not_counted") if total is None
                                       else counted(float(total), enabled_ns=interval_ns))
                    continue
                previous = self._totals.pop(cgroup, None)
                if total is not None:
                    self._totals[cgroup] = total
                if total is None or previous is None or total < previous:
                    readings[event] = without_number("not_counted", enabled_ns=interval_ns)
                else:
                    readings[event] = counted(float(total - previous), enabled_ns=interval_ns)
            out[cgroup] = readings
        return out

    def close(self) -> None:
        self._remove(self.groups.values())
        self.groups.clear()
        self._totals.clear()

    def _remove(self, groups: Iterable[Path]) -> None:
        for group in list(groups):
            try:
                group.rmdir()  # the kernel removes a group's own files with it
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    log.warning("resctrl: cannot remove %s (%s)", group, exc.strerror or exc)


def _domain_sum(group: Path, event: str) -> int | None:
    """The event summed over the group's L3 domains (None: no domain, or one without a reading)."""
    domains: Sequence[Path]
    try:
        domains = sorted(p for p in (group / "mon_data").iterdir() if p.name.startswith("mon_L3_"))
    except OSError:
        return None
    total = 0
    for domain in domains:
        try:
            text = (domain / event).read_text().strip()
        except OSError:
            return None
        if text in _UNREADABLE or not text.isdigit():
            return None
        total += int(text)
    return total if domains else None


def llc_bytes(sysfs_root: str | Path = "/sys") -> int | None:
    """This node's last-level cache in bytes: every distinct L3 (by the CPUs sharing it) summed; None if unlisted."""
    seen: set[str] = set()
    total = 0
    cpus = Path(sysfs_root) / "devices" / "system" / "cpu"
    for cache in sorted(cpus.glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            if (cache / "level").read_text().strip() != "3":
                continue
            shared = (cache / "shared_cpu_list").read_text().strip()
            size = (cache / "size").read_text().strip()
        except OSError:
            continue
        if shared in seen:
            continue
        seen.add(shared)
        total += _size_bytes(size)
    return total or None


def _size_bytes(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    return int(text) if text.isdigit() else 0
