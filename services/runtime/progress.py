"""Liveness from progress: a consuming stage is stalled when it has input waiting and commits nothing.

"The process answers HTTP" is not liveness for a stream stage: a consumer whose fetch or commit
path is wedged (e.g. a producer busy with metadata requests after a broker restart) still serves
/healthz between its event loop's other work. A consume loop reports what it knows to a ``Progress``:

- ``note_lag(total_lag)`` whenever it knows its input lag (summed over its assigned partitions;
  0 when it is caught up: an idle stage is healthy however long nothing arrives);
- ``note_commit(offsets)`` after every successful offset commit, with the offsets committed: a
  commit counts as progress only when some offset differs from what was committed before (a loop
  that re-commits the same offsets on a timer is not making progress). ``note_commit()`` without
  offsets always counts.

``stalled()`` names the stall when the lag has been > 0 for ``stall_after_s`` without a commit.
Register ``progress.check`` with ``HealthServer.add_liveness`` so /healthz answers 503.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping


class Progress:
    def __init__(self, stall_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if stall_after_s <= 0:
            raise ValueError(f"stall_after_s must be > 0, got {stall_after_s}")
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._lag = 0
        # the moment from which a missing commit counts: the last commit, or when input started
        # waiting (a stage idle for an hour that gets input now is not an hour late)
        self._since = clock()
        self._committed: dict[Hashable, int] = {}

    @property
    def lag(self) -> int:
        return self._lag

    def note_lag(self, total_lag: int) -> None:
        if total_lag > 0 and self._lag <= 0:
            self._since = self._clock()
        self._lag = max(total_lag, 0)

    def note_commit(self, offsets: Mapping[Hashable, int] | None = None) -> None:
        if offsets is not None:
            # "moved", not "grew": an offset reset to an earlier position is the group moving too
            advanced = [key for key, off in offsets.items() if self._committed.get(key) != off]
            if not advanced:
                return
            for key in advanced:
                self._committed[key] = offsets[key]
        self._since = self._clock()

    def stalled(self, now: float) -> str | None:
        """Why the stage counts as stalled at ``now`` (same clock as the constructor's), or None."""
        if self._lag <= 0:
            return None
        waited = now - self._since
        if waited < self.stall_after_s:
            return None
        return (
            f"input lag {self._lag} and no offset commit for {waited:.0f}s "
            f"(HEALTH_STALL_AFTER_S={self.stall_after_s:g})"
        )

    def check(self) -> str | None:
        """A liveness check for ``HealthServer.add_liveness``."""
        return self.stalled(self._clock())
