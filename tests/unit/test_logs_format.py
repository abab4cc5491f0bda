"""The JSON log line: a UTC timestamp whatever the local zone, and the current span's ids."""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Iterator

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from services.runtime.logs import JsonFormatter


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("borg.test", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    return record


@pytest.fixture
def new_york() -> Iterator[None]:
    """Local time five hours behind UTC in winter (restored afterwards, tzset included)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_ts_is_utc_under_a_non_utc_zone(new_york: None) -> None:
    assert time.localtime(1_700_000_000).tm_hour != time.gmtime(1_700_000_000).tm_hour  # the zone took effect
    created = 1_700_000_000.25  # 2023-11-14T22:13:20.250Z
    line = orjson.loads(JsonFormatter("svc").format(_record(created)))
    expected = dt.datetime.fromtimestamp(created, dt.UTC)
    assert line["ts"] == expected.strftime("%Y-%m-%dT%H:%M:%S.") + f"{expected.microsecond // 1000:03d}Z"
    assert line["ts"] == "2023-11-14T22:13:20.250Z"
    assert line["msg"] == "hello world"


def test_trace_and_span_ids_inside_a_span() -> None:
    tracer = TracerProvider().get_tracer("test")
    formatter = JsonFormatter("svc")
    with tracer.start_as_current_span("work") as span:
        line = orjson.loads(formatter.format(_record(time.time())))
    ctx = span.get_span_context()
    assert line["trace_id"] == f"{ctx.trace_id:032x}"
    assert line["span_id"] == f"{ctx.span_id:016x}"
    outside = orjson.loads(formatter.format(_record(time.time())))
    assert "trace_id" not in outside and "span_id" not in outside
