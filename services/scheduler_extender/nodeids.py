"""A dense integer per node name, shared by the store's per-node score rows and the learned shadow's caches.

One dictionary probe per candidate then gives the row of every per-node array (the heuristic's scores,
the learned Q codes), so the shadow does not walk 5,000 card tuples or keep a second name index of its own.
Ids only grow; :meth:`NodeIds.renumber` starts afresh (a new ``epoch``) once most names are gone, and
anything holding ids from an older epoch drops them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np


class NodeIds:
    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._ids)

    def peek(self, name: str) -> int:
        """The node's id, -1 when it has none (never assigns)."""
        return self._ids.get(name, -1)

    def get(self, name: str) -> int:
        """The node's id, assigned on first sight."""
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self._ids)
        return i

    def of(self, names: Sequence[str]) -> np.ndarray:
        """Ids of ``names`` in order (int64), assigning new ones."""
        ids = np.fromiter(map(self._ids.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        new = np.flatnonzero(ids < 0)
        for k in new.tolist():
            ids[k] = self.get(names[k])
        return ids

    def renumber(self, keep: Iterable[str]) -> dict[str, int]:
        """Forget every name not in ``keep``; the new ids (0..) of those kept. Bumps ``epoch``."""
        self._ids = {}
        for name in keep:
            self.get(name)
        self.epoch += 1
        return self._ids
