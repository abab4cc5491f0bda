"""NodeAgentSettings: every knob of `borgctl serve node-agent`, from NODE_AGENT_* variables."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.runtime.settings import RuntimeSettings

Compression = Literal["zstd", "lz4", "snappy", "gzip", "none"]


def _default_spool_dir() -> str:
    state = os.environ.get("BORG_STATE") or str(Path.home() / ".cache" / "borg-orchestrator" / "state")
    return str(Path(state) / "node-agent" / "spool")


def split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


class NodeAgentSettings(RuntimeSettings):
    model_config = SettingsConfigDict(env_prefix="NODE_AGENT_", frozen=True, extra="ignore", case_sensitive=False)

    node: str = Field(
        default_factory=socket.gethostname, min_length=1, max_length=253, description="Kafka key and NodeState.node"
    )
    interval_s: float = Field(default=1.0, gt=0.0, le=3600.0, description="Sampling interval")
    source: Literal["live", "synthetic"] = "live"
    spool_dir: str = Field(default_factory=_default_spool_dir)
    spool_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    spool_segment_bytes: int | None = Field(default=None, ge=1024)
    spool_fsync: bool = False
    compression: Compression = "zstd"
    delivery_timeout_s: float = Field(
        default=5.0, gt=0.0, le=300.0, description="Give up on one delivery attempt after this"
    )
    retry_backoff_max_s: float = Field(
        default=5.0, gt=0.0, le=300.0, description="Longest wait between delivery retries"
    )
    batch_records: int = Field(default=500, ge=1, le=100_000)
    events: str = Field(default="", description="Comma-separated events to count (empty: the default set)")
    raw_events: str = Field(default="", description="Extra events, e.g. r0280,cpu/event=0x3c/,msr/tsc/")
    cgroup_root: str | None = Field(default=None, description="Count per cgroup (pod) below this directory")
    cgroup_depth: int = Field(default=2, ge=1, le=8)
    cgroup_max: int = Field(default=64, ge=1, le=4096)
    cgroup_events: str = ""
    resctrl_root: str | None = Field(
        default=None,
        description="resctrl mount (e.g. /sys/fs/resctrl): read each pod cgroup's LLC occupancy and memory traffic "
        "through a monitoring group (Intel RDT CMT/MBM, AMD PQoS); needs cgroup_root",
    )
    membw_peak_gbps: float | None = Field(
        default=None, gt=0.0, le=10_000.0,
        description="This node's memory bandwidth in GB/s: the scale of its pods' memory-traffic readings",
    )
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"
    record_cpu_freq: bool = True
    synthetic_nodes: int = Field(default=1, ge=1, le=100_000)
    synthetic_seed: int = 0
    ground_truth_path: str | None = Field(default=None, description="Synthetic source: write ground truth JSONL here")
    validate_samples: bool = True

    @model_validator(mode="after")
    def _resctrl_needs_cgroups(self) -> NodeAgentSettings:
        if self.resctrl_root and not self.cgroup_root:
            raise ValueError(
                "NODE_AGENT_RESCTRL_ROOT needs NODE_AGENT_CGROUP_ROOT (monitoring groups follow pod cgroups)"
            )
        return self
