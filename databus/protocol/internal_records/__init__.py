"""Kafka's internal topics' records: the one home of their schemas and codecs.

The broker's coordinators keep their state in compacted internal topics, replayed at start
(the newest record per key is the truth, a null value a tombstone).  Their record layouts
are Kafka knowledge, declared here once, as Kafka generates them from its JSON schemas; the
coordinators (broker/coordinator/, broker/txn/, broker/share/) and ``databus dump-log`` use
them, none declares a layout of its own:

- ``consumer_offsets``: ``__consumer_offsets``' offset commits and classic groups' metadata
  (keys v0-2), byte for byte Kafka's;
- ``consumer_groups``: the consumer groups' (KIP-848) records of the same topic (keys 3-8);
- ``transaction_state``: ``__transaction_state`` (TransactionLogKey/Value v0);
- ``share_group_state``: ``__share_group_state`` (databus's own layout of Kafka's content).

All three topics place a key by Kafka's ``partitionFor`` (``partition_for`` below).  The
primitive encoding they share is protocol/binary.py's.
"""

from __future__ import annotations


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode()``: s[0]*31^(n-1) + ... over UTF-16 code units, as int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_utils_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like Math.abs but Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if n == -(2**31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """GroupMetadataManager.partitionFor: the ``__consumer_offsets`` partition of a group."""
    return java_utils_abs(java_string_hashcode(group_id)) % num_partitions
