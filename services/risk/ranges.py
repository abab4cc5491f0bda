"""Which inputs of a model row lie outside the range the failure model was trained on.

The model card's ``input_ranges`` maps a column name (a task feature, or a node feature the
model uses) to ``[lo, hi]``: the 0.1st and 99.9th percentiles of that column over the
training rows. A value below ``lo`` or above ``hi`` is out of range; a missing value (NaN) is
not (the model was trained with missing values). Columns without a range are never flagged,
so a card without ``input_ranges`` flags nothing. One vectorised comparison per batch: the
periodic re-score checks every running task at once.

Bounds are compared as float32, the dtype of the model rows: rounding is monotone, so a value
at or inside a float64 bound stays inside after both are rounded to float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_NAMES = 64
"""``FailureRiskV2.out_of_range`` holds at most this many names."""


@dataclass(frozen=True)
class InputRanges:
    columns: tuple[str, ...]
    lo: np.ndarray
    """float32 per column, -inf where the card gives no range."""
    hi: np.ndarray
    ranged: int = 0
    """How many columns have a range."""

    @classmethod
    def none(cls, columns: Sequence[str]) -> InputRanges:
        n = len(columns)
        return cls(tuple(columns), np.full(n, -np.inf, dtype=np.float32), np.full(n, np.inf, dtype=np.float32))

    @classmethod
    def from_card(cls, ranges: Mapping[str, Any] | None, columns: Sequence[str]) -> InputRanges:
        """``ranges`` from the card (None: no ranges). Raises ValueError for a malformed entry or an unknown column."""
        out = cls.none(columns)
        if not ranges:
            return out
        if not isinstance(ranges, Mapping):
            raise ValueError(f"input_ranges must map column names to [lo, hi], got {type(ranges).__name__}")
        index = {name: i for i, name in enumerate(columns)}
        lo, hi = out.lo.copy(), out.hi.copy()
        for name, bounds in ranges.items():
            if name not in index:
                raise ValueError(f"input_ranges names {name!r}, which is not an input of this model")
            if (not isinstance(bounds, Sequence) or len(bounds) != 2
                    or not all(isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b)
                               for b in bounds) or bounds[0] > bounds[1]):
                raise ValueError(f"input_ranges[{name!r}] must be [lo, hi] with finite lo <= hi, got {bounds!r}")
            lo[index[name]], hi[index[name]] = bounds[0], bounds[1]
        return cls(out.columns, lo, hi, len(ranges))

    def outside(self, x: np.ndarray) -> list[tuple[str, ...]]:
        """Per row of ``x`` (n, len(columns)): the names of its columns outside their range, in column order."""
        n = len(x)
        if not self.ranged or n == 0:
            return [()] * n
        x32 = np.asarray(x, dtype=np.float32)
        mask = (x32 < self.lo) | (x32 > self.hi)  # NaN compares False: missing is not out of range
        found: dict[int, list[str]] = {}
        rows, cols = np.nonzero(mask)  # row-major: each row's columns come out in column order
        for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
            found.setdefault(i, []).append(self.columns[j])
        out: list[tuple[str, ...]] = [()] * n
        for i, names in found.items():
            out[i] = tuple(names)
        return out


def merge(outside: Sequence[str], unmapped: Sequence[str]) -> list[str]:
    """The ``out_of_range`` list of a task: range violations, then unit-mapping refusals, at most ``MAX_NAMES``."""
    names = [*outside, *sorted(unmapped)]
    if len(names) > MAX_NAMES:
        names = [*names[:MAX_NAMES - 1], f"+{len(names) - MAX_NAMES + 1} more"]
    return names
