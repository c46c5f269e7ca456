"""Kafka's RoundRobinAssignor, to the letter.

All partitions of all subscribed topics, sorted by topic then partition, are dealt one at a
time to the members in sorted order (group.instance.id first, then member id), cycling; a
member not subscribed to a partition's topic is skipped for that partition.
"""

from __future__ import annotations

from ...protocol.consumer_protocol import TopicPartition
from .member import GroupMemberInfo


class RoundRobinAssignor:
    name = "roundrobin"
    rebalance_protocol = "eager"

    def assign(
        self, members: list[GroupMemberInfo], partitions_per_topic: dict[str, int]
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(members, key=lambda m: m.sort_key)
        out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        if not ordered:
            return out
        position = 0
        for topic in sorted(partitions_per_topic):
            for partition in range(partitions_per_topic[topic]):
                for step in range(len(ordered)):
                    member = ordered[(position + step) % len(ordered)]
                    if topic in member.subscription.topics:
                        out[member.member_id].append((topic, partition))
                        position = (position + step + 1) % len(ordered)
                        break
        return out
