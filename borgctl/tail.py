"""`borgctl tail <topic>`: pretty-print messages with headers and trace ids."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaConsumer

from borgctl.errors import UserError
from contracts.headers import header, trace_id_of
from contracts.topics import topic_spec


def _format(record: object, show_headers: bool) -> str:
    ts = datetime.fromtimestamp(record.timestamp / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]  # type: ignore[attr-defined]
    key = record.key.decode("utf-8", "replace") if record.key is not None else "-"  # type: ignore[attr-defined]
    headers = record.headers  # type: ignore[attr-defined]
    trace_id = trace_id_of(headers) or "-"
    try:
        body = orjson.dumps(orjson.loads(record.value), option=orjson.OPT_INDENT_2).decode()  # type: ignore[attr-defined]
    except orjson.JSONDecodeError:
        body = repr(record.value)  # type: ignore[attr-defined]
    line = (
        f"── {record.topic}[{record.partition}]@{record.offset}  {ts}  key={key}  "  # type: ignore[attr-defined]
        f"trace={trace_id}  schema={header(headers, 'schema') or '-'}"
    )
    if show_headers:
        line += "\n   headers: " + ", ".join(f"{k}={v.decode('utf-8', 'replace')}" for k, v in headers)
    return f"{line}\n{body}"


async def tail(bootstrap: str, topic: str, *, from_beginning: bool, limit: int | None, show_headers: bool) -> int:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
    )
    try:
        await consumer.start()
    except Exception as exc:
        raise UserError(f"cannot reach Kafka at {bootstrap}: {exc} (is `borgctl up` running?)", 1) from None
    seen = 0
    try:
        async for record in consumer:
            print(_format(record, show_headers), flush=True)
            seen += 1
            if limit is not None and seen >= limit:
                break
    finally:
        await consumer.stop()
    return 0


def run(bootstrap: str, topic: str, from_beginning: bool, limit: int | None, show_headers: bool) -> int:
    try:
        topic_spec(topic)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    try:
        return asyncio.run(tail(bootstrap, topic, from_beginning=from_beginning, limit=limit, show_headers=show_headers))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 0
