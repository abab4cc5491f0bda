"""List, then watch from the list's resourceVersion; resume after timeouts, re-list on 410 GoneError.

The informer pattern without a cache of its own: `on_replace` receives every fresh
list (the sink diffs it against what it knew, so objects deleted while not watching
are reported), `on_event` every ADDED / MODIFIED / DELETED. BOOKMARK events only move
the resourceVersion forward.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from services.cluster_watcher.resources import Resource
from services.runtime.kube_client import GoneError
from services.runtime.pause import pause

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Source(Protocol):
    async def list(self, res: Resource) -> tuple[list[Obj], str]: ...

    def watch(self, res: Resource, resource_version: str, timeout_s: int) -> AsyncIterator[tuple[str, Obj]]: ...


@dataclass
class ReflectorStats:
    lists: int = 0
    relists_after_gone: int = 0
    resumes: int = 0
    events: int = 0
    errors: int = 0


class Reflector:
    def __init__(
        self,
        res: Resource,
        source: Source,
        *,
        on_replace: Callable[[list[Obj]], Awaitable[None]],
        on_event: Callable[[str, Obj], Awaitable[None]],
        timeout_s: int = 240,
        resume_from: str | None = None,
        max_backoff_s: float = 10.0,
    ) -> None:
        self.res = res
        self.source = source
        self.on_replace = on_replace
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.resource_version = resume_from
        self.max_backoff_s = max_backoff_s
        self.stats = ReflectorStats()
        self.synced = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        backoff = 0.2
        while not stop.is_set():
            try:
                if self.resource_version is None:
                    items, rv = await self.source.list(self.res)
                    self.stats.lists += 1
                    await self.on_replace(items)
                    self.resource_version = rv
                    self.synced.set()
                await self._watch(stop)
                backoff = 0.2
            except GoneError as exc:
                self.stats.relists_after_gone += 1
                log.info("%s: %s; listing again", self.res.plural, exc)
                self.resource_version = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # API down, connection reset: back off and resume from the last version
                self.stats.errors += 1
                log.warning(
                    "%s: watch failed (%s: %s); retrying in %.1fs", self.res.plural, type(exc).__name__, exc, backoff
                )
                await pause(stop, backoff)
                backoff = min(self.max_backoff_s, backoff * 2)

    async def _watch(self, stop: asyncio.Event) -> None:
        assert self.resource_version is not None
        timeout = self.timeout_s + random.randint(0, max(1, self.timeout_s // 5))
        stream = self.source.watch(self.res, self.resource_version, timeout)
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while True:
                nxt = asyncio.ensure_future(anext(stream))
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    nxt.cancel()
                    with contextlib.suppress(BaseException):
                        await nxt
                    return
                try:
                    kind, obj = nxt.result()
                except StopAsyncIteration:
                    self.stats.resumes += 1  # server-side timeout: resume from the last version
                    self.synced.set()
                    return
                self.synced.set()  # (also when resumed from a stored version without a list)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    self.stats.events += 1
                    await self.on_event(kind, obj)
                if rv:
                    self.resource_version = str(rv)
        finally:
            stopper.cancel()
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except (RuntimeError, StopAsyncIteration):
                    pass

