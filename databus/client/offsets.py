"""ListOffsets: earliest / latest / by-timestamp offsets of partitions, asked of their leaders.

Shared by the consumer (auto.offset.reset, seek_to_*, offsets_for_times) and the admin
client.  Requests are grouped per leader; partitions whose leader moved (NOT_LEADER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, a lost connection) are retried after a
metadata refresh until ``timeout`` runs out.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.types import TopicPartition
from . import errors
from .cluster import Cluster

EARLIEST = -2  # Kafka's ListOffsets sentinel timestamps
LATEST = -1


async def list_offsets(
    cluster: Cluster,
    timestamps: Mapping[TopicPartition, int],
    *,
    timeout: float,
    isolation_level: int = 0,
) -> dict[TopicPartition, tuple[int, int]]:
    """{tp: timestamp or EARLIEST/LATEST} -> {tp: (offset, timestamp)}.

    For a timestamp lookup with no record at or after it, the offset is -1 (as Kafka
    answers).  Raises the first non-retriable error, or RequestTimedOutError.
    """
    remaining = dict(timestamps)
    result: dict[TopicPartition, tuple[int, int]] = {}
    last_error: BaseException | None = None
    backoff = cluster.config.retry_backoff_ms / 1000
    with trio.move_on_after(timeout):
        while remaining:
            topics = {t for t, _ in remaining}
            if any(cluster.leader_for(*tp) < 0 for tp in remaining):
                try:
                    await cluster.refresh_metadata(topics, allow_auto_create=False)
                except errors.KafkaError as exc:
                    last_error = exc
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in remaining:
                leader = cluster.leader_for(*tp)
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
                else:
                    meta = cluster.topics.get(tp[0])
                    if meta is not None and meta.error_code and not errors.for_code(meta.error_code).retriable:
                        raise errors.from_code(meta.error_code, f"topic {tp[0]!r}")
                    if meta is not None and not meta.error_code and tp[1] not in meta.partitions:
                        raise errors.UnknownTopicOrPartitionError(
                            f"{tp[0]}-{tp[1]}: topic has {len(meta.partitions)} partitions"
                        )
            for leader, tps in by_leader.items():
                try:
                    got = await _ask(cluster, leader, tps, remaining, isolation_level)
                except errors.KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last_error = exc
                    continue
                for tp, (code, offset, ts) in got.items():
                    if code == 0:
                        result[tp] = (offset, ts)
                        remaining.pop(tp, None)
                    else:
                        err = errors.from_code(code, f"ListOffsets {tp[0]}-{tp[1]}")
                        if not err.retriable:
                            raise err
                        last_error = err
            if remaining:
                await trio.sleep(backoff)
                try:
                    await cluster.refresh_metadata({t for t, _ in remaining}, allow_auto_create=False)
                except errors.KafkaError as exc:
                    last_error = exc
        return result
    raise errors.RequestTimedOutError(
        f"ListOffsets for {sorted(remaining)} did not complete within {timeout:.1f}s"
        + (f" (last error: {last_error})" if last_error else "")
    )


async def _ask(cluster, leader, tps, timestamps, isolation_level):
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "timestamp": timestamps[(topic, partition)],
             "current_leader_epoch": -1}
        )
    response = await cluster.request(
        leader,
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": isolation_level,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
    )
    out = {}
    for topic in response.topics:
        for p in topic.partitions:
            out[(topic.name, int(p.partition_index))] = (
                int(p.error_code), int(p.offset), int(getattr(p, "timestamp", -1))
            )
    return out
