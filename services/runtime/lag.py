"""Consumer lag on a timer, so ``borg_consumer_lag`` keeps moving while a processor stalls.

The batch loops set the gauge when a batch arrives; a stalled or blocked loop receives no
batch, so the gauge froze at its last (often small) value exactly when lag was growing.
:func:`lag_reporter` runs beside a loop and, every ``interval_s``, sets the gauge for each
assigned partition to ``end offset − position`` and hands the sum to ``on_total``.

The end offset is asked of the broker (``end_offsets``, one request per round for all
partitions) rather than read from ``highwater``: ``highwater`` comes from the last fetch
response, and the fetcher stops fetching a partition whose records the loop has not taken
yet, so it freezes in the very stall this is for. ``highwater`` is the fallback when that
request fails. Positions are the consumer's (the offset after the last record the loop was
given); the broker's answer honours the consumer's isolation level (the last stable offset
under read_committed), as the loops' own figure does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from services.runtime.metrics import CONSUMER_LAG
from services.runtime.pause import pause

log = logging.getLogger(__name__)


async def lag_reporter(
    consumer: AIOKafkaConsumer,
    stop: asyncio.Event,
    interval_s: float = 5.0,
    on_total: Callable[[int], None] | None = None,
    *,
    timeout_s: float = 10.0,
) -> None:
    """Report lag every ``interval_s`` until ``stop`` is set; never raises (but is cancellable).

    ``on_total`` gets the total lag over the assignment, only when every assigned partition
    could be read (a partial or empty assignment, e.g. during a rebalance, is not "caught up").
    Partitions no longer assigned lose their gauge: another process owns their lag now.
    """
    reported: set[TopicPartition] = set()
    while not stop.is_set():
        try:
            reported = await _report_once(consumer, reported, on_total, timeout_s)
        except asyncio.CancelledError:
            raise
        except (KafkaError, TimeoutError) as exc:  # the broker or the group is unavailable: try next round
            log.debug("consumer lag not read this round: %s: %s", type(exc).__name__, exc)
        except Exception:  # a bug here must not take the processor down; it must not hide either
            log.warning("consumer lag reporter failed this round", exc_info=True)
        await pause(stop, interval_s)


async def _report_once(
    consumer: AIOKafkaConsumer,
    reported: set[TopicPartition],
    on_total: Callable[[int], None] | None,
    timeout_s: float,
) -> set[TopicPartition]:
    """One round: set the gauge per assigned partition; returns the partitions it has set."""
    assigned: set[TopicPartition] = set(consumer.assignment())
    for gone in reported - assigned:
        _remove(gone)
    if not assigned:
        return set()
    ends = await _end_offsets(consumer, sorted(assigned), timeout_s)
    lags: dict[TopicPartition, int] = {}
    for tp in assigned:
        end = ends.get(tp)
        if end is None:
            continue
        try:  # waits while the position is being reset (e.g. just after assignment): bounded
            position = await asyncio.wait_for(consumer.position(tp), timeout=timeout_s)
        except (KafkaError, TimeoutError) as exc:  # revoked meanwhile, or no position yet
            log.debug("no position for %s-%d: %s", tp.topic, tp.partition, exc)
            continue
        lags[tp] = max(0, end - position)
        CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lags[tp])
    if on_total is not None and len(lags) == len(assigned):
        on_total(sum(lags.values()))
    return (reported & assigned) | set(lags)


async def _end_offsets(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                       timeout_s: float) -> dict[TopicPartition, int]:
    """The broker's end offsets; the last fetch's high-water marks when it cannot say."""
    try:
        # end_offsets may wait forever for a partition that no longer exists: bounded
        ends: dict[TopicPartition, int] = await asyncio.wait_for(consumer.end_offsets(tps), timeout=timeout_s)
        return ends
    except (KafkaError, TimeoutError) as exc:
        log.debug("end offsets unavailable (%s: %s): using the last fetch's high-water marks",
                  type(exc).__name__, exc)
    highs = {tp: consumer.highwater(tp) for tp in tps}
    return {tp: high for tp, high in highs.items() if high is not None}


def _remove(tp: TopicPartition) -> None:
    try:
        CONSUMER_LAG.remove(tp.topic, str(tp.partition))
    except KeyError:  # never set (no reading for it yet)
        pass
