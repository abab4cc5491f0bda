"""The partition a keyed record goes to: the producer's default partitioner, computed ahead of sending."""

from __future__ import annotations

from collections.abc import Collection

from aiokafka.partitioner import murmur2


def default_partition(key: bytes, partitions: Collection[int]) -> int:
    """The partition aiokafka's ``DefaultPartitioner`` picks for a non-null ``key``.

    ``partitions`` is what the producer passes as ``all_partitions`` — the topic's partition
    ids from ``producer.partitions_for(topic)`` (a set; ``list()`` of it as in
    ``AIOKafkaProducer._partition``). Java's default partitioner agrees (murmur2 of the key).
    """
    all_partitions = list(partitions)
    return int(all_partitions[(murmur2(key) & 0x7FFFFFFF) % len(all_partitions)])
