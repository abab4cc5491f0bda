"""Poison pills are quarantined, dead letters are written once, and no input stops a stage (real broker).

One partition holds good records and four bad ones: a value the handler dead-letters itself
(``BAD``), one that makes the handler raise (``RAISE``), one of 1,000,000 bytes the handler
dead-letters (its dead letter must still fit a produce request), and one that kills the process
(``POISON``, as a crash in native code would). The test restarts the process whenever it dies,
as the local supervisor and Kubernetes do. Expected: two crashes (the first makes the next start
handle records one at a time from the committed offset, which pins the record down; whether the
first run had committed anything before it died or not), then the poison is dead-lettered as
``poison`` and skipped; every other record is handled; each bad record has exactly one dead
letter, although the crashes came after some letters were written and before their offsets were
committed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from contracts import DeadLetterV2, decode
from services.runtime import deadletter
from services.runtime.recovery import Mark
from services.runtime.stream_settings import app_id
from tests.conftest import ROOT, wait_until
from tests.integration.poison_process import POISON_EXIT
from tests.kafka_helpers import drain

pytestmark = [pytest.mark.integration]
GOOD = 120
BAD_AT = {10: b"BAD-schema", 20: b"RAISE", 30: b"BAD" + b"\x00" * (1_000_000 - 3), 35: b"POISON"}


async def _produce(bootstrap: str, topic: str, bad_at: dict[int, bytes] = BAD_AT) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=2 * 1024 * 1024)
    await producer.start()
    try:
        for offset in range(GOOD):
            value = bad_at.get(offset, f"good-{offset}".encode())
            await producer.send_and_wait(topic, value=value, key=b"k", partition=0)
    finally:
        await producer.stop()


def _spawn(bootstrap: str, prefix: str, service: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.poison_process", bootstrap, prefix, service, str(log)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log.with_suffix(".err"), "ab"),
        # a crashed member holds the partition until its session expires: the smallest timeout the
        # settings accept lets each restart in sooner (the test crashes the process twice)
        env={**os.environ, "STREAM_SESSION_TIMEOUT_S": "6"},
    )


def _handled(log: Path) -> set[int]:
    if not log.exists():
        return set()
    return {int(line.split()[1]) for line in log.read_text().splitlines() if line.strip()}


async def _run_until_handled(bootstrap: str, prefix: str, service: str, log: Path, *, good: set[int],
                             most_crashes: int) -> tuple[int, list[DeadLetterV2]]:
    """Run the process, restarting it whenever the poison kills it, until every ``good`` offset is handled."""
    crashes = 0
    proc = _spawn(bootstrap, prefix, service, log)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while not good <= _handled(log):
            assert loop.time() < deadline, (
                f"after {crashes} crashes, not handled: {sorted(good - _handled(log))[:10]}; "
                f"{log.with_suffix('.err').read_text()[-3000:]}")
            code = proc.poll()
            if code is not None:
                assert code == POISON_EXIT, f"exit {code}: {log.with_suffix('.err').read_text()[-3000:]}"
                crashes += 1
                assert crashes <= most_crashes, f"the poison pill was not quarantined after {most_crashes} crashes"
                proc = _spawn(bootstrap, prefix, service, log)
            await asyncio.sleep(0.1)
        letters = [decode(DeadLetterV2, r.value) for r in await drain(bootstrap, f"{prefix}deadletter.v2")]
        await wait_until(lambda: proc.poll() is None, what="the last process still running")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.with_suffix(".err").read_text()[-3000:]
    return crashes, letters


async def test_poison_is_quarantined_and_each_bad_record_dead_lettered_once(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    topic = f"{topic_prefix}nodestate.v1"
    await _produce(kafka_bootstrap, topic)
    service = f"poison-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "handled.log"
    crashes, letters = await _run_until_handled(kafka_bootstrap, topic_prefix, service, log,
                                                good=set(range(GOOD)) - set(BAD_AT), most_crashes=2)
    assert crashes == 2
    mine = [letter for letter in letters if letter.service == service]
    by_offset: dict[int, list[DeadLetterV2]] = {}
    for letter in mine:
        by_offset.setdefault(letter.offset, []).append(letter)
    assert {o: len(ls) for o, ls in by_offset.items()} == {10: 1, 20: 1, 30: 1, 35: 1}, "one dead letter each"
    assert [by_offset[o][0].error_kind for o in (10, 20, 30, 35)] == ["schema", "processing", "schema", "poison"]
    assert "cannot handle offset 20" in by_offset[20][0].error
    huge = by_offset[30][0].value
    assert huge is not None and huge.truncated and huge.size == 1_000_000
    assert len(huge.b64) <= deadletter.VALUE_MAX * 4 // 3 + 4
    assert deadletter.original_value(by_offset[35][0]) == b"POISON"
    assert all(letter.source_topic == topic and letter.partition == 0 for letter in mine)


async def _commit_as_a_crashed_run(bootstrap: str, prefix: str, service: str, topic: str, offset: int) -> None:
    """The commit a run leaves when it died after progress: ``offset``, a progress mark (not clean, no attempts)."""
    committer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=app_id(service, prefix),
                                 enable_auto_commit=False)
    await committer.start()
    try:
        tp = TopicPartition(topic, 0)
        committer.assign([tp])
        await committer.commit({tp: (offset, Mark(ts_ms=int(time.time() * 1000), attempts=0).encode())})
    finally:
        await committer.stop()


async def test_a_crash_after_a_careful_pass_is_not_blamed_on_its_last_record(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """The careful pass after a crash (offsets 0-49, one batch) finds nothing; the poison is at 80.

    Its closing commit moves past offset 49 with the run's attempts: the next start neither
    quarantines the good record 49 nor counts the pass as progress, goes carefully over a wider
    window and pins the poison: two crashes, one dead letter, every good record handled.
    """
    topic = f"{topic_prefix}nodestate.v1"
    await _produce(kafka_bootstrap, topic, {80: b"POISON"})
    service = f"after-pass-{uuid.uuid4().hex[:6]}"
    await _commit_as_a_crashed_run(kafka_bootstrap, topic_prefix, service, topic, 0)
    log = tmp_path / "handled.log"
    crashes, letters = await _run_until_handled(kafka_bootstrap, topic_prefix, service, log,
                                                good=set(range(GOOD)) - {80}, most_crashes=2)
    # the first run's careful pass ends before the poison, so it dies in batches once; the second pins it
    # (after the pass's closing mark, or after a regular commit that landed first: both go carefully again)
    assert crashes == 2
    assert [(letter.offset, letter.error_kind) for letter in letters if letter.service == service] == [(80, "poison")]


async def test_a_poison_met_after_the_last_run_had_committed_progress_costs_one_crash(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """The previous run got past its start (its commits reset the start mark) and then died.

    Its commit is written here, as that run would have left it: offset 31, a progress mark (not
    clean, no attempts). This start handles a batch's worth one record at a time from 31, so the
    poison at 35 kills it once and is quarantined on the next start (it used to take a second
    crash with the partition handled in batches again, then a third).
    """
    topic = f"{topic_prefix}nodestate.v1"
    await _produce(kafka_bootstrap, topic)
    service = f"progress-{uuid.uuid4().hex[:6]}"
    await _commit_as_a_crashed_run(kafka_bootstrap, topic_prefix, service, topic, 31)
    log = tmp_path / "handled.log"
    crashes, letters = await _run_until_handled(kafka_bootstrap, topic_prefix, service, log,
                                                good=set(range(31, GOOD)) - set(BAD_AT), most_crashes=1)
    assert crashes == 1
    assert [(letter.offset, letter.error_kind) for letter in letters if letter.service == service] == [(35, "poison")]
    assert min(_handled(log)) == 31, "the run restarted from the committed offset"


async def test_a_record_the_client_cannot_unpack_is_dead_lettered_and_nothing_around_it_is_lost(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """A header name that is not UTF-8 makes aiokafka's getmany raise for the whole fetch."""
    from tests.integration.test_malformed_corpus import kcat_send
    from tests.malformed_corpus import consumer_breaking_cases

    topic = f"{topic_prefix}nodestate.v1"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for offset in range(5):
            await producer.send_and_wait(topic, value=f"good-{offset}".encode(), key=b"k", partition=0)
        [case] = consumer_breaking_cases("nodestate.v1")
        await kcat_send(kafka_bootstrap, topic, case, tmp_path / "case.bin")  # offset 5, partition 0
        for offset in range(6, 12):
            await producer.send_and_wait(topic, value=f"good-{offset}".encode(), key=b"k", partition=0)
    finally:
        await producer.stop()
    service = f"unreadable-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "handled.log"
    proc = _spawn(kafka_bootstrap, topic_prefix, service, log)
    try:
        await wait_until(lambda: proc.poll() is not None or _handled(log) >= set(range(12)) - {5}, timeout=60,
                         what="every good record handled")
        assert proc.poll() is None, log.with_suffix(".err").read_text()[-3000:]
        letters = [decode(DeadLetterV2, r.value) for r in await drain(kafka_bootstrap, f"{topic_prefix}deadletter.v2")]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.with_suffix(".err").read_text()[-3000:]
    assert [(letter.offset, letter.error_kind) for letter in letters if letter.service == service] == [(5, "malformed")]
    assert "cannot unpack" in letters[-1].error
