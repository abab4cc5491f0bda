"""Progress lines on stderr, with elapsed time (training is long enough to want them)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Callable that prints ``[  12.3s] message``; ``enabled=False`` silences it."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self._stream = stream
        self._enabled = enabled
        self._t0 = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._t0

    def __call__(self, message: str) -> None:
        if self._enabled:
            stream = self._stream if self._stream is not None else sys.stderr
            print(f"[{self.elapsed_s:7.1f}s] {message}", file=stream, flush=True)


QUIET = Progress(enabled=False)
