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
from services.runtime.kafka_security import kafka_client_options


def summarize(topic: str, value: bytes | None, jaeger: str) -> str:
    """One line per message: what an operator scans for in a live decision log."""
    try:
        obj = orjson.loads(value or b"null")
    except orjson.JSONDecodeError:
        return f"{topic}: <not JSON, {len(value or b'')} bytes>"
    if not isinstance(obj, dict):
        return f"{topic}: {obj!r}"
    target = obj.get("target")
    where = f"{target.get('kind')}/{target.get('name')}" if isinstance(target, dict) else obj.get("node", "?")
    if "proposals" in obj:
        weighed = ", ".join(f"{p['agent']}:{p['kind']}({p['score']:.2f})" for p in obj["proposals"])
        trace = f"  {jaeger}/trace/{obj['trace_id']}" if obj.get("trace_id") else ""
        head = f"DECISION {obj['decision_id']} {where}: {obj['action']} [{obj['mode']}]"
        return f"{head} — {obj['reason']} | weighed: {weighed}{trace}"
    if "outcome" in obj:
        head = f"ACTION   {obj['decision_id']} {where}: {obj['action']} → {obj['outcome']}"
        return f"{head} ({obj.get('api_status')}) {obj['message'][:80]}"
    if "error_kind" in obj:
        where = f"{obj['source_topic']}[{obj['partition']}]@{obj['offset']}"
        return f"DEAD     {where} {obj['error_kind']}: {obj['error'][:100]}"
    return f"{topic} {where}: " + orjson.dumps(obj).decode()[:160]


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


async def tail(
    bootstrap: str,
    topic: str | list[str],
    *,
    from_beginning: bool,
    limit: int | None,
    show_headers: bool,
    summary: bool = False,
    jaeger: str = "http://127.0.0.1:16686",
    until: float | None = None,
) -> int:
    topics = [topic] if isinstance(topic, str) else topic
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap, **kafka_client_options(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
    )
    try:
        await consumer.start()
    except Exception as exc:
        raise UserError(f"cannot reach Kafka at {bootstrap}: {exc} (is `borgctl up` running?)", 1) from None
    seen = 0
    loop = asyncio.get_running_loop()
    try:
        while until is None or loop.time() < until:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    if summary:
                        print(summarize(record.topic, record.value, jaeger), flush=True)
                    else:
                        print(_format(record, show_headers), flush=True)
                    seen += 1
                    if limit is not None and seen >= limit:
                        return 0
    finally:
        await consumer.stop()
    return 0


def run(
    bootstrap: str,
    topics: list[str],
    from_beginning: bool,
    limit: int | None,
    show_headers: bool,
    summary: bool = False,
    seconds: float | None = None,
) -> int:
    for topic in topics:
        try:
            topic_spec(topic)
        except KeyError as exc:
            raise UserError(str(exc.args[0])) from None

    async def go() -> int:
        until = None if seconds is None else asyncio.get_running_loop().time() + seconds
        return await tail(
            bootstrap,
            topics,
            from_beginning=from_beginning,
            limit=limit,
            show_headers=show_headers,
            summary=summary,
            until=until,
        )

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 0
