"""Domain randomisation of workload kinds: jittered copies of the training kinds (training only).

A model trained on three kinds per class learns those kinds' solo profiles (IPC, miss rates, stall
fractions, core counts) instead of what contention does to them, and transfers badly to kinds it
never saw. Training on many randomly perturbed copies of the training kinds — every solo-profile
parameter scaled by ``exp(N(0, sigma))``, pressures by ``exp(N(0, pressure_sigma))`` with the dominant
resource and an above-threshold peak kept, so each copy stays an aggressor of its class — forces the
classifier onto the relations the simulator's contention model imposes. The copies are derived from
the training kinds only; the held-out kinds are never read.

The simulator looks kinds up by name in ``simulator.workloads.KINDS``; the copies are registered
there for the duration of the ``with`` block and removed afterwards (single-threaded training only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

import numpy as np

from simulator import KINDS, REGIME_THRESHOLD, WorkloadKind

PRESSURE_SIGMA: Final = 0.15
VARIANT_MARK: Final = "~"


def variants(kinds: Sequence[str], per_kind: int, sigma: float, seed: int) -> list[WorkloadKind]:
    """``per_kind`` jittered copies of every kind in ``kinds`` (named ``<kind>~<i>``)."""
    rng = np.random.default_rng(seed)
    out: list[WorkloadKind] = []
    for name in kinds:
        base = KINDS[name]
        made = 0
        while made < per_kind:
            llc, bw, core, fe = (float(min(0.95, p * np.exp(rng.normal(0.0, PRESSURE_SIGMA)))) for p in base.pressure)
            pressure = (llc, bw, core, fe)
            if int(np.argmax(pressure)) != int(np.argmax(base.pressure)) or max(pressure) <= REGIME_THRESHOLD + 0.05:
                continue  # it must stay an aggressor on its class's resource

            def j(v: float) -> float:
                return float(v * np.exp(rng.normal(0.0, sigma)))

            out.append(dataclasses.replace(
                base, name=f"{name}{VARIANT_MARK}{made}", ipc=min(j(base.ipc), 4.0), llc_apki=j(base.llc_apki),
                llc_miss_ratio=min(j(base.llc_miss_ratio), 0.95), branch_pki=j(base.branch_pki),
                branch_miss_ratio=min(j(base.branch_miss_ratio), 0.2),
                frontend_stall=min(j(base.frontend_stall), 0.6), backend_stall=min(j(base.backend_stall), 0.85),
                cores=max(1.0, j(base.cores)), mem_gb=j(base.mem_gb), pressure=pressure))
            made += 1
    return out


@contextmanager
def randomized_kinds(kinds: Sequence[str], per_kind: int, sigma: float, seed: int) -> Iterator[list[str]]:
    """The kinds plus their jittered copies, registered in the simulator while the block runs."""
    extra = variants(kinds, per_kind, sigma, seed) if per_kind > 0 and sigma > 0 else []
    clash = [v.name for v in extra if v.name in KINDS]
    if clash:
        raise RuntimeError(f"kind variants already registered: {clash[:3]}")
    for v in extra:
        KINDS[v.name] = v
    try:
        yield [*kinds, *(v.name for v in extra)]
    finally:
        for v in extra:
            KINDS.pop(v.name, None)
