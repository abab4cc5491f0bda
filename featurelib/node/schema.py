"""The node feature schema: base metrics, windows, hop, feature names, their hash, model input.

Feature names are ``<metric>_<stat>`` with stats ``mean_10s, mean_60s, mean_300s,
std_60s, z_300s, delta_10s`` plus ``samples_frac_10s``; :func:`node_feature_schema_hash`
covers names, windows and hop, so a model trained on another definition is refused.
Hopping windows of 10 s, 60 s and 300 s advance by one pane of ``HOP_MS`` and are unions of
the last 1, 6 and 30 panes (``featurelib.node.panes``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

FEATURE_SCHEMA_VERSION: Final = "node-features-v1"
HOP_MS: Final = 10_000
WINDOWS_S: Final = (10, 60, 300)
PANES_300: Final = 300_000 // HOP_MS
PANES_60: Final = 60_000 // HOP_MS
METRICS: Final[tuple[str, ...]] = (
    "ipc",
    "cpi",
    "llc_mpki",
    "llc_miss_ratio",
    "cache_mpki",
    "cache_miss_ratio",
    "membw_gbs",
    "membw_util",
    "stall_frontend",
    "stall_backend",
    "branch_mpki",
    "branch_miss_ratio",
    "cpu_util",
    "mem_util",
    "ctx_switches_log",
    "page_faults_log",
    "busy_cpus",
    "inst_gps",
    "llc_loads_gps",
    "llc_misses_gps",
    "cache_refs_gps",
    "cache_misses_gps",
    "branch_misses_gps",
    "rec_mkpi",
    "rec_mem_gps",
    "sanity_violation",
)
M: Final = len(METRICS)
MI: Final = {name: i for i, name in enumerate(METRICS)}
STATS: Final = ("mean_10s", "mean_60s", "mean_300s", "std_60s", "z_300s", "delta_10s")
NODE_FEATURE_NAMES: Final[tuple[str, ...]] = (
    *(f"{m}_{s}" for m in METRICS for s in STATS),
    "samples_frac_10s",
)
N_FEATURES: Final = len(NODE_FEATURE_NAMES)
FEATURE_INDEX: Final = {name: i for i, name in enumerate(NODE_FEATURE_NAMES)}


def vector_problem(vector: Any, schema_hash: str, consumer: str) -> str | None:
    """Why a FeatureVector cannot be fed to `consumer`'s model (None when it can)."""
    if vector.schema_hash != schema_hash:
        return (
            f"feature schema {vector.schema_hash[:12]}… differs from the model's {schema_hash[:12]}… "
            f"(features and {consumer} run different feature definitions)"
        )
    if len(vector.values) != N_FEATURES:
        return f"model input needs {N_FEATURES} features, the vector has {len(vector.values)}"
    return None


def node_feature_schema_hash() -> str:
    """sha256 over the schema version, hop, windows and the ordered feature names."""
    text = (
        f"{FEATURE_SCHEMA_VERSION}\nhop_ms={HOP_MS}\nwindows_s={','.join(map(str, WINDOWS_S))}\n"
        + "\n".join(NODE_FEATURE_NAMES)
    )
    return hashlib.sha256(text.encode()).hexdigest()


def as_model_input(values: Sequence[float], valid: Sequence[bool]) -> np.ndarray:
    """float32 row with NaN where a feature is not valid (what every node model consumes)."""
    arr = np.asarray(values, dtype=np.float32)
    mask = np.asarray(valid, dtype=bool)
    return np.where(mask, arr, np.float32(np.nan)).astype(np.float32)
