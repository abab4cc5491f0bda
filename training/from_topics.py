"""``borgctl train {regime,failure} --from-topics …``: retrain from what the system recorded on its topics.

Both read every committed record of the named topics (prefix ``BORG_TOPIC_PREFIX``, broker
``KAFKA_BOOTSTRAP``) from the beginning to the end offsets seen at the start, build a training set
with the same leakage rules as offline training (a time split; nothing after a point is used to
describe it) and write a **candidate** version beside the current one: ``CURRENT`` is never moved
(promote it with ``borgctl model promote`` once it has been checked). Each run appends its result
to ``<model root>/trainer_runs.jsonl`` (``training/trainer.py`` shows it). Per model:

* ``training/from_topics_regime.py``: features.v1 windows + simulator ground truth (``--truth``);
* ``training/from_topics_failure.py``: taskevents.v1 lifecycle events (outcomes are in the events).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from services.runtime.admin import connect_admin
from services.runtime.changelog import read_to_end
from services.runtime.topic_reader import TopicsMissingError, topic_partitions

RUNS_FILE = "trainer_runs.jsonl"
Reporter = Callable[[str], None]


class FromTopicsError(ValueError):
    """Not enough recorded data (or a bad argument): one line for the operator, exit 2."""


def bootstrap() -> str:
    return os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def prefix() -> str:
    return os.environ.get("BORG_TOPIC_PREFIX", "")


async def _read(server: str, topic: str, limit: int, progress: Reporter) -> list[Any]:
    admin = await connect_admin(server)
    try:
        partitions = await topic_partitions(admin, [topic])
    except TopicsMissingError:
        raise FromTopicsError(f"topic {topic} does not exist on {server}") from None
    finally:
        await admin.close()
    out: list[Any] = []
    started = time.perf_counter()
    async for _, msgs in read_to_end(server, partitions):
        out.extend(m for m in msgs if m.value is not None)
        if len(out) >= limit:
            progress(f"{topic}: stopped at --max-records {limit:,}")
            break
    progress(f"read {len(out):,} records of {topic} in {time.perf_counter() - started:.1f}s")
    return out[:limit]


def read_topic(topic: str, *, limit: int, progress: Reporter) -> list[Any]:
    """Every committed record of ``prefix + topic`` (at most ``limit``), as aiokafka ConsumerRecords."""
    return asyncio.run(_read(bootstrap(), prefix() + topic, limit, progress))


def record_run(root: Path, result: dict[str, Any]) -> None:
    """Append one run's result (version, figures, or the error) to ``<root>/trainer_runs.jsonl``."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / RUNS_FILE).open("ab") as out:
        out.write(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def main(model: str, argv: Sequence[str]) -> int:
    """``borgctl train <model> --from-topics …`` (argv still holds ``--from-topics``)."""
    if model == "regime":
        from training.from_topics_regime import train_regime_from_topics

        return train_regime_from_topics(list(argv))
    if model == "failure":
        from training.from_topics_failure import train_failure_from_topics

        return train_failure_from_topics(list(argv))
    print(f"train {model}: --from-topics is built for regime and failure only", file=sys.stderr)
    return 2


if __name__ == "__main__":  # what the trainer runs: python -m training.from_topics MODEL --from-topics ...
    if len(sys.argv) < 2:
        print("usage: python -m training.from_topics {regime,failure} --from-topics [TOPIC] ...", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
