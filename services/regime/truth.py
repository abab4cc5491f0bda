"""Ground-truth regimes for online metrics, where the traffic has them: the simulator's truth side channel.

Live NodeState never carries a label (a real cluster has none). Simulated traffic does, beside the
stream: ``borgctl replay --source synthetic --truth-out FILE`` writes one JSON line per node and tick
(``node``, ``ts_ms``, ``regime``). With ``REGIME_TRUTH_FILE`` pointing at it, the stage tails that file
while a candidate is being compared, and labels a window (node, end ``ts_ms``) the way training does
(``training/regime/simwindows.py``): the majority regime over the ticks of its pane,
``[ts_ms - HOP_MS, ts_ms)``. A window whose ticks have not been read yet stays unlabelled (the
features stage emits a window after its pane closed, so the ticks normally came first).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from pathlib import Path

import orjson

from featurelib.node.schema import HOP_MS

log = logging.getLogger(__name__)
TICKS_KEPT = 120
"""Ticks kept per node: two minutes of 1 Hz truth, far more than the features stage lags."""
READ_MAX = 8 << 20
"""Bytes read per poll (a long backlog is caught up over several polls)."""


class TruthTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.ticks: dict[str, deque[tuple[int, str]]] = {}
        self.read = 0

    def poll(self) -> int:
        """Read the lines appended since the last poll; returns how many were taken."""
        try:
            size = self.path.stat().st_size
            if size < self.offset:  # a new file (another replay): start over
                self.offset = 0
                self.ticks.clear()
            if size == self.offset:
                return 0
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read(READ_MAX)
        except OSError:
            return 0
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        taken = 0
        for line in chunk[:end].splitlines():
            try:
                record = orjson.loads(line)
                node, ts_ms, regime = record["node"], int(record["ts_ms"]), record["regime"]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            ticks = self.ticks.get(node)
            if ticks is None:
                ticks = self.ticks[node] = deque(maxlen=TICKS_KEPT)
            ticks.append((ts_ms, str(regime)))
            taken += 1
        self.offset += end
        self.read += taken
        return taken

    def label(self, node: str, ts_ms: int) -> str | None:
        """The majority regime of the window ending at ``ts_ms``; None when no tick of it is known."""
        ticks = self.ticks.get(node)
        if not ticks:
            return None
        start = ts_ms - HOP_MS
        seen = Counter(r for t, r in ticks if start <= t < ts_ms)
        return seen.most_common(1)[0][0] if seen else None
