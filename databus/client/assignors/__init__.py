"""Partition assignors, by Kafka's names: ``range``, ``roundrobin``, ``sticky``,
``cooperative-sticky``.

An assignor is an object with ``name``, ``rebalance_protocol`` ("eager" or "cooperative") and
``assign(members, partitions_per_topic) -> {member_id: [(topic, partition), ...]}`` where
``members`` are GroupMemberInfo (member id, decoded Subscription, group.instance.id) and
``partitions_per_topic`` maps each subscribed topic to its partition count.  The group
leader runs it; the bytes on the wire are Kafka's ConsumerProtocol
(databus/protocol/consumer_protocol.py).
"""

from __future__ import annotations

from .member import GroupMemberInfo
from .range import RangeAssignor
from .roundrobin import RoundRobinAssignor
from .sticky import CooperativeStickyAssignor, StickyAssignor

ASSIGNORS = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}

__all__ = [
    "ASSIGNORS",
    "CooperativeStickyAssignor",
    "GroupMemberInfo",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
]
