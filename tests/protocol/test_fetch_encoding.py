"""The hand-written Fetch encoder: kio's bytes for every advertised version, and golden bytes
(written from Kafka's FetchResponse schema, not produced by any encoder) for the error and
empty cases, where Kafka sends empty records, never null."""

from __future__ import annotations

import datetime
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.fetch_encoding import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    encode_fetch_body,
)
from databus.protocol.framing import encode_response, response_schema

i64s = st.integers(-1, 2**40)
partition = st.builds(
    PartitionResult,
    index=st.integers(0, 1000),
    error_code=st.sampled_from([0, 1, 3, 6]),
    high_watermark=i64s,
    last_stable_offset=i64s,
    log_start_offset=i64s,
    aborted_transactions=st.one_of(
        st.none(), st.lists(st.tuples(i64s, i64s), max_size=2).map(tuple)
    ),
    records=st.binary(max_size=300),
)
topics = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.lists(partition, max_size=3)), max_size=3
)


def _kio_bytes(version: int, topics_value, session_id: int) -> bytes:
    schema = response_schema(1, version)
    module = sys.modules[schema.__module__]
    responses = []
    for name, partitions in topics_value:
        entries = []
        for p in partitions:
            aborted = None
            if p.aborted_transactions is not None:
                aborted = tuple(
                    module.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in p.aborted_transactions
                )
            entries.append(build(
                module.PartitionData, partition_index=p.index,
                error_code=ErrorCode(p.error_code), high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                aborted_transactions=aborted, preferred_read_replica=-1,
                records=bytes(p.records),
            ))
        responses.append(build(module.FetchableTopicResponse, topic=name, topic_id=name,
                               partitions=tuple(entries)))
    body = build(schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 session_id=session_id, responses=tuple(responses))
    frame = encode_response(1, version, 0, body)
    header = 4 + 4 + (1 if version >= 12 else 0)  # size, correlation id, tagged fields
    return frame[header:]


@settings(max_examples=60, deadline=None)
@given(version=st.integers(MIN_VERSION, MAX_VERSION), topics_value=topics,
       session_id=st.integers(0, 2**31 - 1))
def test_fetch_body_matches_kio(version, topics_value, session_id):
    if version >= 13:  # topics by id
        topics_value = [(uuid.uuid5(uuid.NAMESPACE_DNS, name), ps) for name, ps in topics_value]
    ours = b"".join(bytes(p) for p in encode_fetch_body(version, topics_value,
                                                        session_id=session_id))
    assert ours == _kio_bytes(version, topics_value, session_id)


def test_records_are_passed_through_uncopied():
    records = memoryview(bytearray(b"x" * 1000))
    parts = encode_fetch_body(12, [("t", [PartitionResult(0, 0, 5, 5, 0, None, records)])])
    assert any(part is records for part in parts)


def test_unadvertised_version_is_refused():

    with pytest.raises(ValueError, match="fetch v17"):
        encode_fetch_body(17, [])


def test_null_records_are_refused():

    # librdkafka cannot parse null records (it spins on "invalid MessageSetSize -1")
    with pytest.raises(ValueError, match="partition 3: records must not be null"):
        encode_fetch_body(12, [("t", [PartitionResult(3, 0, records=None)])])


# -- golden bytes ------------------------------------------------------------------------------
#
# One response per layout, with every error and empty case a consumer meets:
#   topic "t":    p0 OFFSET_OUT_OF_RANGE (1): Kafka's error partition, offsets -1, no records
#                 p1 empty (fetch at the log end), read_uncommitted: aborted_transactions null
#                 p2 empty, read_committed: aborted_transactions an empty array
#                 p3 empty, one aborted transaction (producer 7 from offset 2)
#   topic "gone": p0 UNKNOWN_TOPIC_OR_PARTITION (3)
# Records are always present and empty: int32 0 in v4-v11, compact length varint 1 in v12.

def _hex(text: str) -> bytes:
    return bytes.fromhex("".join(line.split("#")[0] for line in text.splitlines()))


# v4: no log_start_offset, no top-level error/session, no preferred_read_replica
GOLDEN_V4 = _hex("""
00000000                                    # throttle_time_ms
00000002                                    # 2 topics
0001 74                                     # "t"
00000004                                    # 4 partitions
00000000 0001 ffffffffffffffff ffffffffffffffff   # p0 OFFSET_OUT_OF_RANGE, hw -1, lso -1
ffffffff 00000000                           #   aborted null, records empty
00000001 0000 0000000000000004 0000000000000004   # p1 hw 4, lso 4
ffffffff 00000000                           #   aborted null, records empty
00000002 0000 0000000000000004 0000000000000004   # p2
00000000 00000000                           #   aborted [], records empty
00000003 0000 0000000000000004 0000000000000004   # p3
00000001 0000000000000007 0000000000000002 00000000   # aborted [(7, 2)], records empty
0004 676f6e65                               # "gone"
00000001                                    # 1 partition
00000000 0003 ffffffffffffffff ffffffffffffffff   # p0 UNKNOWN_TOPIC_OR_PARTITION
ffffffff 00000000                           #   aborted null, records empty
""")

# v5 adds log_start_offset after last_stable_offset (v6 changes nothing in the response)
GOLDEN_V5 = _hex("""
00000000
00000002
0001 74
00000004
00000000 0001 ffffffffffffffff ffffffffffffffff ffffffffffffffff   # log start -1
ffffffff 00000000
00000001 0000 0000000000000004 0000000000000004 0000000000000000   # log start 0
ffffffff 00000000
00000002 0000 0000000000000004 0000000000000004 0000000000000000
00000000 00000000
00000003 0000 0000000000000004 0000000000000004 0000000000000000
00000001 0000000000000007 0000000000000002 00000000
0004 676f6e65
00000001
00000000 0003 ffffffffffffffff ffffffffffffffff ffffffffffffffff
ffffffff 00000000
""")

# v7 adds the top-level error_code and session_id (v8-v10 change nothing in the response)
GOLDEN_V7 = _hex("""
00000000 0000 00000000                      # throttle, error NONE, session 0
00000002
0001 74
00000004
00000000 0001 ffffffffffffffff ffffffffffffffff ffffffffffffffff
ffffffff 00000000
00000001 0000 0000000000000004 0000000000000004 0000000000000000
ffffffff 00000000
00000002 0000 0000000000000004 0000000000000004 0000000000000000
00000000 00000000
00000003 0000 0000000000000004 0000000000000004 0000000000000000
00000001 0000000000000007 0000000000000002 00000000
0004 676f6e65
00000001
00000000 0003 ffffffffffffffff ffffffffffffffff ffffffffffffffff
ffffffff 00000000
""")

# v11 adds preferred_read_replica (-1: read from the leader) between aborted and records
GOLDEN_V11 = _hex("""
00000000 0000 00000000
00000002
0001 74
00000004
00000000 0001 ffffffffffffffff ffffffffffffffff ffffffffffffffff
ffffffff ffffffff 00000000                  # aborted null, replica -1, records empty
00000001 0000 0000000000000004 0000000000000004 0000000000000000
ffffffff ffffffff 00000000
00000002 0000 0000000000000004 0000000000000004 0000000000000000
00000000 ffffffff 00000000
00000003 0000 0000000000000004 0000000000000004 0000000000000000
00000001 0000000000000007 0000000000000002 ffffffff 00000000
0004 676f6e65
00000001
00000000 0003 ffffffffffffffff ffffffffffffffff ffffffffffffffff
ffffffff ffffffff 00000000
""")

# v12 is flexible: compact arrays/strings (varint length+1, 0 = null), compact records
# (varint size+1: empty is 01, null would be 00), a tagged-field byte after each struct
GOLDEN_V12 = _hex("""
00000000 0000 00000000
03                                          # 2 topics
02 74                                       # "t"
05                                          # 4 partitions
00000000 0001 ffffffffffffffff ffffffffffffffff ffffffffffffffff
00 ffffffff 01 00                           # aborted null, replica -1, records empty, tags
00000001 0000 0000000000000004 0000000000000004 0000000000000000
00 ffffffff 01 00
00000002 0000 0000000000000004 0000000000000004 0000000000000000
01 ffffffff 01 00                           # aborted []
00000003 0000 0000000000000004 0000000000000004 0000000000000000
02 0000000000000007 0000000000000002 00     # aborted [(7, 2)], the entry's tags
ffffffff 01 00
00                                          # topic tags
05 676f6e65                                 # "gone"
02                                          # 1 partition
00000000 0003 ffffffffffffffff ffffffffffffffff ffffffffffffffff
00 ffffffff 01 00
00                                          # topic tags
00                                          # response tags
""")

# v13-v16 name topics by their 16-byte id (here 00..01 for "t", 00..02 for "gone")
GOLDEN_V13 = _hex("""
00000000 0000 00000000
03                                          # 2 topics
00000000000000000000000000000001            # topic id of "t"
05                                          # 4 partitions
00000000 0001 ffffffffffffffff ffffffffffffffff ffffffffffffffff
00 ffffffff 01 00
00000001 0000 0000000000000004 0000000000000004 0000000000000000
00 ffffffff 01 00
00000002 0000 0000000000000004 0000000000000004 0000000000000000
01 ffffffff 01 00
00000003 0000 0000000000000004 0000000000000004 0000000000000000
02 0000000000000007 0000000000000002 00
ffffffff 01 00
00                                          # topic tags
00000000000000000000000000000002            # topic id of "gone"
02
00000000 0064 ffffffffffffffff ffffffffffffffff ffffffffffffffff
00 ffffffff 01 00                           # UNKNOWN_TOPIC_ID (100)
00
00                                          # response tags (no node endpoints)
""")

GOLDEN = {4: GOLDEN_V4, 5: GOLDEN_V5, 6: GOLDEN_V5, 7: GOLDEN_V7, 8: GOLDEN_V7,
          9: GOLDEN_V7, 10: GOLDEN_V7, 11: GOLDEN_V11, 12: GOLDEN_V12, 13: GOLDEN_V13,
          14: GOLDEN_V13, 15: GOLDEN_V13, 16: GOLDEN_V13}

GOLDEN_TOPICS = [
    ("t", [
        PartitionResult(0, ErrorCode.offset_out_of_range),
        PartitionResult(1, 0, 4, 4, 0, None, b""),
        PartitionResult(2, 0, 4, 4, 0, (), b""),
        PartitionResult(3, 0, 4, 4, 0, ((7, 2),), b""),
    ]),
    ("gone", [PartitionResult(0, ErrorCode.unknown_topic_or_partition)]),
]


GOLDEN_TOPICS_BY_ID = [
    (uuid.UUID(int=1), GOLDEN_TOPICS[0][1]),
    (uuid.UUID(int=2), [PartitionResult(0, ErrorCode.unknown_topic_id)]),
]


def test_golden_covers_every_advertised_version():
    assert sorted(GOLDEN) == list(range(MIN_VERSION, MAX_VERSION + 1))


@pytest.mark.parametrize("version", sorted(GOLDEN))
def test_error_and_empty_partitions_golden_bytes(version):
    topics = GOLDEN_TOPICS if version < 13 else GOLDEN_TOPICS_BY_ID
    ours = b"".join(bytes(p) for p in encode_fetch_body(version, topics))
    assert ours.hex() == GOLDEN[version].hex()
    # and kio, the reference for field order, decodes it as Kafka's empty records
    assert ours == _kio_bytes(version, topics, 0)
