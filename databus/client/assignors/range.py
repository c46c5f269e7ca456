"""Kafka's RangeAssignor, to the letter.

Per topic, independently: the members subscribed to it, sorted (group.instance.id first,
then member id), and the partitions in numeric order.  With N partitions and C members, each
member gets N // C consecutive partitions and the first N % C members one more; so 10
partitions over 3 members give 4/3/3 (partitions 0-3, 4-6, 7-9).
"""

from __future__ import annotations

from ...protocol.consumer_protocol import TopicPartition
from .member import GroupMemberInfo


class RangeAssignor:
    name = "range"
    rebalance_protocol = "eager"

    def assign(
        self, members: list[GroupMemberInfo], partitions_per_topic: dict[str, int]
    ) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            consumers = sorted(
                (m for m in members if topic in m.subscription.topics), key=lambda m: m.sort_key
            )
            if not consumers or count <= 0:
                continue
            per_member, extra = divmod(count, len(consumers))
            for i, member in enumerate(consumers):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                out[member.member_id].extend((topic, p) for p in range(start, start + length))
        return out
