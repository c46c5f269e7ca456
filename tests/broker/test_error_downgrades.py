"""Error codes newer than a request's version reach old clients as the code they know
(databus/protocol/error_downgrades.py), as Kafka's broker does: a stale producer epoch on
EndTxn / AddOffsetsToTxn / InitProducerId of a version before KIP-588 is
INVALID_PRODUCER_EPOCH (47), never PRODUCER_FENCED (90), which those clients cannot decode.

Raw requests through our codec against a real ``databus broker``; the old versions' answers
are checked as bytes.  Every rule of the table is also driven through the codec at every
version kio has, and docs/protocol.md's table is checked against the code's.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import typing
from pathlib import Path

import pytest

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build_request, error_entity
from databus.protocol.error_downgrades import DOWNGRADES, downgrade_response
from databus.protocol.errors import ErrorCode, error_name
from databus.protocol.fetch_encoding import PartitionResult, encode_fetch_body
from databus.protocol.framing import decode_response, encode_response, response_schema

from .wire import WireClient

FENCED, EPOCH = ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch
DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def _init(client: WireClient, txn: str, version: int = 3, **fields):
    return client.request(build_request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": txn, "transaction_timeout": 60_000,
        "producer_id": -1, "producer_epoch": -1, **fields}))


def _raw_answer(client: WireClient, api_key: int, version: int, fields: dict) -> bytes:
    """The answer's bytes after the correlation id (and the request's correlation id)."""
    correlation = client.send(build_request(api_key, version, fields))
    frame = client.read_frame()
    assert struct.unpack_from(">i", frame)[0] == correlation
    return frame[4:]


@pytest.fixture(scope="module")
def fenced(broker):
    """A transactional id whose first epoch is fenced by a second InitProducerId: (client,
    transactional id, producer id, the stale epoch)."""
    with WireClient(broker.bootstrap) as client:
        created = client.request(build_request(ApiKey.CREATE_TOPICS, 5, {
            "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1}],
            "timeout": 10_000}))
        assert created.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
        first = _init(client, "downgrade-txn")
        assert first.error_code == ErrorCode.none
        second = _init(client, "downgrade-txn")
        assert second.error_code == ErrorCode.none
        assert second.producer_epoch > first.producer_epoch
        yield client, "downgrade-txn", first.producer_id, first.producer_epoch


@pytest.mark.parametrize("version", [0, 1])
def test_end_txn_before_v2_answers_a_stale_epoch_with_invalid_producer_epoch(fenced, version):
    client, txn, pid, stale = fenced
    body = _raw_answer(client, ApiKey.END_TXN, version, {
        "transactional_id": txn, "producer_id": pid, "producer_epoch": stale, "committed": True})
    assert body == struct.pack(">ih", 0, EPOCH)  # throttle_time_ms, error_code


@pytest.mark.parametrize("version", [0, 1])
def test_add_offsets_to_txn_before_v2_answers_invalid_producer_epoch(fenced, version):
    client, txn, pid, stale = fenced
    body = _raw_answer(client, ApiKey.ADD_OFFSETS_TO_TXN, version, {
        "transactional_id": txn, "producer_id": pid, "producer_epoch": stale,
        "group_id": "downgrade-group"})
    assert body == struct.pack(">ih", 0, EPOCH)


def test_add_partitions_to_txn_v1_answers_invalid_producer_epoch_per_partition(fenced):
    client, txn, pid, stale = fenced
    body = _raw_answer(client, ApiKey.ADD_PARTITIONS_TO_TXN, 1, {
        "v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": stale,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
    # throttle, [topic "t" [partition 0, error]]
    assert body == struct.pack(">ii", 0, 1) + struct.pack(">h", 1) + b"t" \
        + struct.pack(">iih", 1, 0, EPOCH)


def test_init_producer_id_v3_with_a_stale_epoch_answers_invalid_producer_epoch(fenced):
    client, txn, pid, stale = fenced
    assert _init(client, txn, 3, producer_id=pid, producer_epoch=stale).error_code == EPOCH


def test_versions_that_know_producer_fenced_still_get_it(fenced):
    client, txn, pid, stale = fenced
    for api_key, version, fields in [
        (ApiKey.END_TXN, 2, {"transactional_id": txn, "producer_id": pid,
                             "producer_epoch": stale, "committed": False}),
        (ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": txn, "producer_id": pid,
                                        "producer_epoch": stale, "group_id": "g"}),
    ]:
        response = client.request(build_request(api_key, version, fields))
        assert response.error_code == FENCED, (api_key, version)
    assert _init(client, txn, 4, producer_id=pid, producer_epoch=stale).error_code == FENCED


def test_fetch_v4_and_v5_get_not_leader_for_a_storage_error_and_v6_the_error_itself():
    def partition_error(version: int) -> int:
        body = b"".join(encode_fetch_body(version, [("t", [PartitionResult(0, 56)])]))
        # throttle, [topic "t" [partition index, error ...]]
        return struct.unpack_from(">h", body, 4 + 4 + 2 + 1 + 4 + 4)[0]

    assert partition_error(4) == partition_error(5) == ErrorCode.not_leader_or_follower
    assert partition_error(6) == ErrorCode.kafka_storage_error


def _versions(api_key: int) -> list[int]:
    found = []
    for version in range(20):
        try:
            response_schema(api_key, version)
        except Exception:  # kio has no schema for this version
            continue
        found.append(version)
    return found


def _filled(cls: type, code: ErrorCode):
    """A ``cls`` entity with one element in every array and ``code`` in every error field."""
    hints = typing.get_type_hints(cls)
    entity = error_entity(cls, code)
    changes = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            changes[f.name] = (_filled(args[0], code),)
    return dataclasses.replace(entity, **changes)


def _error_codes(entity) -> list[int]:
    codes = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            codes.append(int(value))
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    codes += _error_codes(item)
        elif dataclasses.is_dataclass(value):
            codes += _error_codes(value)
    return codes


@pytest.mark.parametrize("rule", DOWNGRADES, ids=lambda r: f"{ApiKey(r.api).name}-{r.newer.name}")
def test_every_rule_maps_every_error_field_below_its_version_and_none_from_it(rule):
    versions = _versions(rule.api)
    assert versions, f"kio has no {ApiKey(rule.api).name} schema"
    for version in versions:
        response = _filled(response_schema(rule.api, version), rule.newer)
        sent = downgrade_response(rule.api, version, response)
        frame = encode_response(rule.api, version, 7, sent)
        _, decoded = decode_response(frame[4:], rule.api, version)
        codes = _error_codes(decoded)
        assert codes, f"{ApiKey(rule.api).name} v{version} has no error field"
        expected = rule.older if rule.applies(version) else rule.newer
        assert set(codes) == {expected}, (version, codes)


def test_docs_table_is_the_code_table():
    text = DOCS.read_text()
    section = text.split("<!-- error-downgrades:start -->")[1].split("<!-- error-downgrades:end")[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not re.fullmatch(r"\d+", cells[1]):
            continue
        rows.add((cells[0], int(cells[1]), cells[2], cells[3], cells[4]))
    expected = {
        ("".join(part.capitalize() for part in ApiKey(rule.api).name.split("_")), rule.api,
         f"{error_name(rule.newer)} ({int(rule.newer)})",
         f"{error_name(rule.older)} ({int(rule.older)})",
         "all" if rule.since is None else ("v0" if rule.since == 1 else f"v0-{rule.since - 1}"))
        for rule in DOWNGRADES
    }
    assert rows == expected
