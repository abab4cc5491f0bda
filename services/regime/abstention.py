"""When the regime model abstains: reason bits, the counters rule, and their wire names.

Pure (numpy only): the regime stage and ``borgctl eval regime`` judge windows with the same
code, so the coverage measured offline is the coverage served. The model-specific rules
(out-of-distribution score, confidence floor) are parameters shipped in the model card
(``abstention``); ``RegimeModel.judge`` applies them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

COUNTERS_MISSING = 1
OUT_OF_DISTRIBUTION = 2
LOW_CONFIDENCE = 4
REASON_BITS: tuple[tuple[int, str], ...] = (
    (COUNTERS_MISSING, "counters_missing"),
    (OUT_OF_DISTRIBUTION, "out_of_distribution"),
    (LOW_CONFIDENCE, "low_confidence"),
)
"""Bit → the ``AbstainReason`` it stands for (contracts.models), in the order reasons are listed."""

DEFAULT_REQUIRED_FEATURES: tuple[str, ...] = ("ipc_mean_10s", "cache_mpki_mean_10s", "llc_mpki_mean_10s")
"""Without instructions per cycle and a cache-miss rate no contention regime can be told apart; a node whose
agent publishes software events only (no hardware PMU) has none of them. Used when a card names none."""

_NAMES = {bit: [name for b, name in REASON_BITS if bit & b] for bit in range(1 << len(REASON_BITS))}


def reasons_of(mask: int) -> list[str]:
    """The wire names of the reasons set in ``mask`` (empty for 0: the model answered)."""
    return list(_NAMES[mask & ((1 << len(REASON_BITS)) - 1)])


def counters_missing(x_full: np.ndarray, required: Sequence[int]) -> np.ndarray:
    """Rows (float32, NaN = invalid) where any feature in ``required`` (column indices) is invalid."""
    if not len(required):
        return np.zeros(x_full.shape[0], dtype=bool)
    return np.asarray(np.isnan(x_full[:, list(required)]).any(axis=1))
