"""Retry delays with decorrelated jitter.

Without jitter every agent that lost the broker in the same outage retries on the same
doubling schedule, so they all reconnect and flush their spools in lock-step the moment it
returns. Decorrelated jitter (each delay uniform in [base, 3 × previous], capped) spreads
the retries while still growing roughly geometrically; every delay stays within
[base, cap]. Each agent draws from its own ``random.Random`` (seeded from the OS unless a
test injects one).
"""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        if not 0.0 < base_s <= cap_s:
            raise ValueError(f"backoff needs 0 < base ({base_s}) <= cap ({cap_s})")
        self.base_s = base_s
        self.cap_s = cap_s
        self._rng = rng if rng is not None else random.Random()  # jitter, not crypto: no secrets module needed
        self._last = base_s

    def next_delay(self) -> float:
        """The wait before the next retry (grows after each failure, until ``reset``)."""
        self._last = min(self.cap_s, self._rng.uniform(self.base_s, self._last * 3.0))
        return self._last

    def reset(self) -> None:
        """After a success: the next failure starts again from ``base_s``."""
        self._last = self.base_s
