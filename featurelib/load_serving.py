"""How the forecast stage turns one ``features.v1`` vector into a :class:`~featurelib.load_features.LoadHistory`
sample, so training (5-minute bucket means of a trace) and serving (bucket means of 10 s windows) share inputs.

``features.v1`` carries each node's 10 s window means of ``cpu_util`` and ``mem_util`` (fractions). The
trainer reads utilisation in percent (0..100, clipped), so a vector becomes the sample
``(window midpoint s, cpu_util_mean_10s × 100, mem_util_mean_10s × 100)`` (NaN where the vector marks the
feature invalid). The midpoint, not the window end, picks the bucket: a window ending exactly on a bucket
boundary lies wholly in the earlier bucket. The bucket mean of thirty 10 s means is then the 5-minute mean
the model was trained on; the 24 h of history the model reads lives in the stage's ``LoadHistory`` per
node (features.v1 itself only reaches back 300 s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from featurelib.node.schema import FEATURE_INDEX

CPU_COLUMN: Final = FEATURE_INDEX["cpu_util_mean_10s"]
MEM_COLUMN: Final = FEATURE_INDEX["mem_util_mean_10s"]


def _percent(value: float, ok: bool) -> float:
    if not ok or value != value:
        return math.nan
    return min(max(value * 100.0, 0.0), 100.0)


def load_sample(ts_ms: int, window_s: int, values: Sequence[float],
                valid: Sequence[bool]) -> tuple[float, float, float]:
    """``(t_s, cpu %, mem %)`` of one feature vector (window end ``ts_ms``, length ``window_s``)."""
    t_s = (ts_ms - window_s * 500) / 1000.0
    return t_s, _percent(values[CPU_COLUMN], valid[CPU_COLUMN]), _percent(values[MEM_COLUMN], valid[MEM_COLUMN])
