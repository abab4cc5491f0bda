"""Pipeline health: messages/s per topic, consumer lag per group, dead letters, the reader's own counts."""

from __future__ import annotations

import base64
import binascii
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from contracts.models import BoundedBytes, DeadLetterV2
from services.dashboard.series import RateWindow, Series

JsonDict = dict[str, Any]
PREVIEW_BYTES = 400
MAX_ERROR = 2000


def _preview(copy: BoundedBytes | None) -> str | None:
    if copy is None:
        return None
    try:
        raw = base64.b64decode(copy.b64, validate=False)
    except (binascii.Error, ValueError):
        return "<not base64>"
    text = raw[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    return text + ("…" if len(raw) > PREVIEW_BYTES or copy.truncated else "")


def base_topic(topic: str, prefix: str) -> str:
    return topic[len(prefix):] if prefix and topic.startswith(prefix) else topic


@dataclass(slots=True)
class TopicHealth:
    window: RateWindow
    series: Series
    read: int = 0  # records this dashboard read (only for the topics it consumes)
    bad: int = 0


@dataclass(slots=True)
class GroupLag:
    topics: dict[str, int]
    ts_ms: int
    series: Series

    @property
    def total(self) -> int:
        return sum(self.topics.values())


@dataclass(slots=True)
class ReaderStatus:
    connected: bool = False
    caught_up: bool = False
    error: str | None = None
    monitor_error: str | None = None
    last_bad: deque[str] = field(default_factory=lambda: deque(maxlen=5))


class PipelineHealth:
    def __init__(self, *, history_ms: int, points: int, max_deadletters: int, topic_prefix: str = "") -> None:
        self.history_ms = history_ms
        self.bucket_ms = max(1000, history_ms // max(1, points))
        self.prefix = topic_prefix
        self.topics: dict[str, TopicHealth] = {}
        self.groups: dict[str, GroupLag] = {}
        self.deadletters: deque[JsonDict] = deque(maxlen=max_deadletters)
        self.deadletter_counts: Counter[tuple[str, str, str]] = Counter()  # (source topic, kind, service)
        self.deadletter_total = 0
        self.deadletter_version = 0
        self.reader = ReaderStatus()

    def _topic(self, base: str) -> TopicHealth:
        health = self.topics.get(base)
        if health is None:
            series = Series(bucket_ms=self.bucket_ms, window_ms=self.history_ms, combine="last")
            health = self.topics[base] = TopicHealth(window=RateWindow(), series=series)
        return health

    def count_read(self, base: str, *, bad: bool = False, error: str | None = None) -> None:
        health = self._topic(base)
        health.read += 1
        if bad:
            health.bad += 1
            if error:
                self.reader.last_bad.append(f"{base}: {error[:300]}")

    def record_offsets(self, now_ms: int, totals: dict[str, int], version: int) -> None:
        """Summed end offsets per base topic, sampled now (a growing total: its slope is messages/s)."""
        for base, total in totals.items():
            health = self._topic(base)
            health.window.add(now_ms, total)
            health.series.add(now_ms, health.window.rate(), version)

    def record_lag(self, now_ms: int, lags: dict[str, dict[str, int]], version: int) -> None:
        """Lag per consumer group and base topic (end offset minus committed offset, summed over partitions)."""
        for group, topics in lags.items():
            lag = self.groups.get(group)
            if lag is None:
                series = Series(bucket_ms=self.bucket_ms, window_ms=self.history_ms, combine="last")
                lag = self.groups[group] = GroupLag(topics={}, ts_ms=now_ms, series=series)
            lag.topics = dict(topics)
            lag.ts_ms = now_ms
            lag.series.add(now_ms, lag.total, version)
        for group in [g for g in self.groups if g not in lags]:
            del self.groups[group]  # group gone or no longer committing on these topics

    def add_deadletter(self, letter: DeadLetterV2, version: int) -> None:
        source = base_topic(letter.source_topic, self.prefix)
        self.deadletter_total += 1
        self.deadletter_counts[(source, letter.error_kind, letter.service)] += 1
        self.deadletters.appendleft(
            {
                "ts": letter.ts_ms,
                "service": letter.service,
                "source_topic": source,
                "partition": letter.partition,
                "offset": letter.offset,
                "kind": letter.error_kind,
                "error": letter.error[:MAX_ERROR],
                "key": _preview(letter.key),
                "value": _preview(letter.value),
                "size": None if letter.value is None else letter.value.size,
                "truncated": letter.value is not None and letter.value.truncated,
            }
        )
        self.deadletter_version = version

    def view(self, since: int | None = None) -> JsonDict:
        topics = [
            {
                "topic": base,
                "rate": round(h.window.rate(), 2),
                "total": h.window.total,
                "read": h.read,
                "bad": h.bad,
                "series": h.series.view(),
            }
            for base, h in sorted(self.topics.items())
        ]
        groups = [
            {
                "group": name,
                "lag": g.total,
                "topics": dict(sorted(g.topics.items(), key=lambda kv: -kv[1])),
                "ts": g.ts_ms,
                "series": g.series.view(),
            }
            for name, g in sorted(self.groups.items(), key=lambda kv: (-kv[1].total, kv[0]))
        ]
        out: JsonDict = {
            "topics": topics,
            "groups": groups,
            "reader": {
                "connected": self.reader.connected,
                "caught_up": self.reader.caught_up,
                "error": self.reader.error,
                "monitor_error": self.reader.monitor_error,
                "last_bad": list(self.reader.last_bad),
            },
            "deadletter_total": self.deadletter_total,
        }
        if since is None or self.deadletter_version > since:
            out["deadletters"] = {
                "by_source": [
                    {"source_topic": s, "kind": k, "service": svc, "count": n}
                    for (s, k, svc), n in self.deadletter_counts.most_common()
                ],
                "last": list(self.deadletters),
            }
        return out
