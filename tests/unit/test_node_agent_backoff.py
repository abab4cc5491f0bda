"""Reconnect back-off: jittered (agents differ), bounded, growing, reset on success."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from services.node_agent import shipper as shipper_module
from services.node_agent.backoff import Backoff
from services.node_agent.shipper import Shipper
from services.node_agent.spool import Spool


def _schedule(backoff: Backoff, n: int) -> list[float]:
    return [backoff.next_delay() for _ in range(n)]


def test_two_agents_differ_and_stay_within_bounds() -> None:
    a = _schedule(Backoff(0.2, 5.0, random.Random(1)), 30)
    b = _schedule(Backoff(0.2, 5.0, random.Random(2)), 30)
    assert a != b
    assert sum(x != y for x, y in zip(a, b, strict=True)) >= 25  # not just one draw apart
    assert all(0.2 <= d <= 5.0 for d in a + b)
    assert a[0] != 0.2 or b[0] != 0.2  # the very first retry is spread too


def test_same_seed_same_schedule_and_growth_to_the_cap() -> None:
    a = _schedule(Backoff(0.2, 5.0, random.Random(7)), 40)
    assert a == _schedule(Backoff(0.2, 5.0, random.Random(7)), 40)
    assert a[0] <= 0.6  # uniform(base, 3 × base)
    assert max(a) > 2.5  # it grows towards the cap rather than hovering at base


def test_unseeded_agents_differ() -> None:
    assert _schedule(Backoff(0.2, 5.0), 10) != _schedule(Backoff(0.2, 5.0), 10)


def test_reset_starts_again_from_base() -> None:
    backoff = Backoff(1.0, 100.0, random.Random(3))
    _schedule(backoff, 20)
    backoff.reset()
    assert 1.0 <= backoff.next_delay() <= 3.0


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_bad_bounds_rejected(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(base, cap)


class _Down:
    """A producer whose broker is always unreachable."""

    async def start(self) -> None:
        raise ConnectionError("broker down")

    async def close_now(self) -> None:
        return None


async def test_shipper_sleeps_the_jittered_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    stop = asyncio.Event()

    async def record_sleep(_stop: asyncio.Event, seconds: float) -> bool:
        slept.append(seconds)
        if len(slept) >= 8:
            stop.set()
        return stop.is_set()

    monkeypatch.setattr(shipper_module, "pause", record_sleep)
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(b"n1", b"x")
    shipper = Shipper(spool, lambda: _Down(), "nodestate.v1",  # type: ignore[arg-type, return-value]
                      backoff_s=(0.2, 5.0), rng=random.Random(11))
    await asyncio.wait_for(shipper.run(stop, drain_on_stop_s=0.0), timeout=10)
    assert slept == _schedule(Backoff(0.2, 5.0, random.Random(11)), 8)
    assert shipper.failures == 8
