"""The hand-written Fetch encoder produces exactly kio's bytes, for every advertised version."""

from __future__ import annotations

import datetime
import sys

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
    records=st.one_of(st.none(), st.binary(max_size=300)),
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
                records=None if p.records is None else bytes(p.records),
            ))
        responses.append(build(module.FetchableTopicResponse, topic=name,
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
    ours = b"".join(bytes(p) for p in encode_fetch_body(version, topics_value,
                                                        session_id=session_id))
    assert ours == _kio_bytes(version, topics_value, session_id)


def test_records_are_passed_through_uncopied():
    records = memoryview(bytearray(b"x" * 1000))
    parts = encode_fetch_body(12, [("t", [PartitionResult(0, 0, 5, 5, 0, None, records)])])
    assert any(part is records for part in parts)


def test_unadvertised_version_is_refused():
    import pytest

    with pytest.raises(ValueError, match="fetch v13"):
        encode_fetch_body(13, [])
