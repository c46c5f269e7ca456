"""The one kio entity builder: client requests, broker responses and error answers."""

from __future__ import annotations

import datetime
import uuid

import pytest

from databus.protocol.entities import build, build_request, error_entity, ms
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import encode_request, encode_response, response_schema

JOIN_GROUP_V1 = bytes.fromhex(
    "00000033" "000b" "0001" "00000007" "000163"  # size, JoinGroup v1, correlation 7, client "c"
    "000167" "00002710" "00007530" "0000"  # group "g", session 10 s, rebalance 30 s, member ""
    "0008" + b"consumer".hex() + "00000001" "0005" + b"range".hex() + "00000002" "0000"
)


def test_request_keeps_the_fields_its_version_has_and_converts_milliseconds():
    request = build_request(11, 1, {
        "group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 30_000, "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\0\0"}],
        "group_instance_id": "v5-and-later",  # JoinGroup v1 has no such field: dropped
    })
    assert request.session_timeout == datetime.timedelta(seconds=10)
    assert encode_request(request, 7, "c") == JOIN_GROUP_V1


def test_required_fields_not_given_get_their_zero():
    # Fetch v13 addresses topics by id; a caller that knows only names gets the zero uuid.
    request = build_request(1, 13, {"topics": [{"partitions": []}]})
    assert request.topics[0].topic_id == uuid.UUID(int=0)
    assert request.max_wait == datetime.timedelta(0)
    assert request.isolation_level == 0


def test_keywords_and_dicts_are_one_builder():
    schema = response_schema(12, 3)  # Heartbeat v3
    given = {"error_code": ErrorCode.rebalance_in_progress}
    assert build(schema, error_code=27) == build(schema, given)
    assert build(schema).error_code is ErrorCode.none
    assert build(schema, {"error_code": 0}, throttle_time=5).throttle_time.total_seconds() == 0.005


def test_error_entity_is_a_decodable_error_answer():
    body = error_entity(response_schema(60, 0), ErrorCode.unsupported_version)  # DescribeCluster
    assert body.error_code is ErrorCode.unsupported_version
    assert body.brokers == () and body.cluster_id == ""
    assert encode_response(60, 0, 9, body) == bytes.fromhex(
        "00000017" "00000009" "00" "00000000" "0023" "00" "01" "ffffffff" "01" "80000000" "00"
    )


@pytest.mark.parametrize(("value", "expected"), [
    (datetime.timedelta(seconds=1.5), 1500),
    (datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), 1_704_067_200_000),
    (42, 42),
])
def test_ms(value, expected):
    assert ms(value) == expected
