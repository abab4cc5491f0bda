"""The training range of each model input, written to the card as ``input_ranges``.

Serving (services/risk, ``ranges.py``) flags a row whose value lies outside ``[lo, hi]`` for a
column: the model never saw such values, so its probability there is an extrapolation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

LOW_PERCENTILE: Final = 0.1
HIGH_PERCENTILE: Final = 99.9


def input_ranges(x: np.ndarray, names: Sequence[str], used: np.ndarray | None = None) -> dict[str, list[float]]:
    """``{name: [lo, hi]}``: the 0.1st and 99.9th percentiles of each column of ``x``, NaN ignored.

    Columns never observed (all NaN) and columns the model does not use (``used`` False) are
    omitted. Values are finite floats with ``lo <= hi``.
    """
    if x.ndim != 2 or x.shape[1] != len(names):
        raise ValueError(f"expected rows of {len(names)} columns, got shape {x.shape}")
    out: dict[str, list[float]] = {}
    for i, name in enumerate(names):
        if used is not None and not used[i]:
            continue
        col = np.asarray(x[:, i], dtype=np.float64)
        col = col[np.isfinite(col)]
        if len(col) == 0:
            continue
        lo, hi = np.percentile(col, [LOW_PERCENTILE, HIGH_PERCENTILE])
        out[name] = [float(lo), float(hi)]
    return out
