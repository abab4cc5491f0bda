"""Services `borgctl serve` knows, and the module that runs each."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceEntry:
    name: str
    module: str
    description: str
    in_local_stack: bool = True
    env: tuple[tuple[str, str], ...] = ()

    def available(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:
            return False

    def main(self) -> Callable[[list[str]], int]:
        module = importlib.import_module(self.module)
        entry: Callable[[list[str]], int] = module.main
        return entry


SERVICES: tuple[ServiceEntry, ...] = (
    ServiceEntry(name="node-agent", module="services.node_agent.main", description="PMU sampling → nodestate.v1"),
    ServiceEntry(
        name="cluster-watcher",
        module="services.cluster_watcher.main",
        description="Kubernetes → taskevents.v1, clusterstate.v1",
    ),
    ServiceEntry(name="features", module="services.features.main", description="nodestate.v1 → features.v1 (windows)"),
    ServiceEntry(name="regime", module="services.regime.main", description="features.v1 → regimes.v2 (ONNX)"),
    ServiceEntry(name="anomaly", module="services.anomaly.main", description="features.v1 → anomalies.v1 (ONNX)"),
    ServiceEntry(name="risk", module="services.risk.main", description="taskevents.v1 + features.v1 → risk.v2 (ONNX)"),
    ServiceEntry(name="drift", module="services.drift.main",
                 description="features.v1 + regimes.v2 + risk.v2 + taskevents.v1 → drift.v1 (PSI, concept drift)"),
    ServiceEntry(name="forecast", module="services.forecast.main", description="features.v1 → forecasts.v1 (ONNX)"),
    ServiceEntry(name="pod-pressure", module="services.pod_pressure.main",
                 description="nodestate.v1 per-pod cgroup counters → podpressure.v1 (ONNX)"),
    ServiceEntry(name="pod-regime", module="services.regime.pods.main",
                 description="nodestate.v1 per-pod counters + each pod's job (Kubernetes) → podregimes.v1 (ONNX)"),
    ServiceEntry(
        name="agent-reliability", module="services.agents.reliability", description="A: replicate / scale out"
    ),
    ServiceEntry(
        name="agent-efficiency", module="services.agents.efficiency", description="B: consolidate / balloon / scale in"
    ),
    ServiceEntry(
        name="agent-admission", module="services.agents.admission", description="C: deprioritize / throttle / taint"
    ),
    ServiceEntry(
        name="referee",
        module="services.referee.main",
        description="proposals.v1 → decisions.v1, actions.v1, Kubernetes",
    ),
    ServiceEntry(
        name="scheduler-extender", module="services.scheduler_extender.main", description="kube-scheduler HTTP extender"
    ),
    ServiceEntry(name="dashboard", module="services.dashboard.main", description="live decisions and pipeline health"),
)


def service(name: str) -> ServiceEntry:
    for entry in SERVICES:
        if entry.name == name:
            return entry
    raise KeyError(name)
