"""The learned shadow's cost, comparable across versions of the extender (5,000 candidates, thread CPU in ms).

``PYTHONPATH=DIR .venv/bin/python loadtests/bench_extender_shadow_ab.py [--calls N] [--label L]`` prints

- ``answer`` / ``shadow after it``: ``Extender.prioritize``, then ``Shadow.observe`` right after it on the same
  answer, interleaved as in the service (each call a freshly parsed candidate list);
- ``back to back``: prioritize calls through the server's handler on one event loop with the shadow on, each
  call first letting the loop run what is ready (whatever shadow work the server scheduled after the
  previous answer), as ``nodes=5000,policy=learned`` of ``borgctl bench extender`` does, and the same without
  the shadow.

It uses only what every version of the extender with a shadow has, so with ``DIR`` an older checkout
(``git archive <commit> services featurelib contracts loadtests models/placement simulator | tar -x -C DIR``)
it measures that version on the same machine at the same time; ``DIR=.`` measures this one
(docs/scheduler_extender.md, "Benchmark").
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any, cast

from aiohttp import web

from loadtests.bench_extender import args_body, node_name, percentile, synthetic_shadow, synthetic_store
from services.scheduler_extender.extender import Extender
from services.scheduler_extender.settings import DEFAULT_CLASS_KEY

NODES = 5_000
WARMUP = 20


class _Request:
    """What the extender's handler reads of an aiohttp request."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.headers: dict[str, str] = {}

    async def read(self) -> bytes:
        return self.body


async def back_to_back(extender: Extender, shadow: Any, body: bytes, calls: int) -> list[float]:
    from services.scheduler_extender.server import ExtenderServer

    server = ExtenderServer(extender, host="127.0.0.1", port=0, shadow=shadow)
    (handle,) = [
        r.handler
        for r in server.app.router.routes()
        if r.method == "POST" and r.resource is not None and r.resource.canonical == "/prioritize"
    ]
    request = cast(web.Request, _Request(body))
    out: list[float] = []
    for k in range(calls + WARMUP):
        c0 = time.thread_time_ns()
        await asyncio.sleep(0)  # the call arrives: what the loop has ready runs first
        await handle(request)
        if k >= WARMUP:
            out.append((time.thread_time_ns() - c0) / 1e6)
    await asyncio.sleep(0.2)  # let the last shadow work end before the loop closes
    return out


def measure(calls: int) -> dict[str, list[float]]:
    store = synthetic_store(NODES, int(time.time() * 1000))
    extender = Extender(store, class_key=DEFAULT_CLASS_KEY, default_class="cpu_bound")
    shadow = synthetic_shadow(store, NODES)
    body = args_body([node_name(i) for i in range(NODES)])
    gc.collect()
    gc.freeze()  # as the service does once its state is loaded
    out = {
        "back to back, heuristic only": asyncio.run(back_to_back(extender, None, body, calls)),
        "back to back, shadow on": asyncio.run(back_to_back(extender, shadow, body, calls)),
    }
    answer: list[float] = []
    after: list[float] = []
    for k in range(calls + WARMUP):
        c0 = time.thread_time_ns()
        _, ex = extender.prioritize(body)
        c1 = time.thread_time_ns()
        shadow.observe(ex)
        c2 = time.thread_time_ns()
        if k >= WARMUP:
            answer.append((c1 - c0) / 1e6)
            after.append((c2 - c1) / 1e6)
    return {"answer": answer, "shadow after it": after, **out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_extender_shadow_ab")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--label", default="this checkout")
    args = parser.parse_args(argv)
    for case, values in measure(args.calls).items():
        print(f"{args.label}: {case}: cpu p50 {percentile(values, 50):.2f} p99 {percentile(values, 99):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
