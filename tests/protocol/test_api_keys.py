"""The API key table: Kafka's numbers under Kafka's names."""

from __future__ import annotations

from databus.protocol.api_keys import ApiKey


def test_kafka_numbers_under_kafka_names():
    # A few from Kafka's ApiKeys enum (clients/src/main/java/.../protocol/ApiKeys.java).
    assert [ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA] == [0, 1, 2, 3]
    assert (ApiKey.OFFSET_COMMIT, ApiKey.JOIN_GROUP, ApiKey.API_VERSIONS) == (8, 11, 18)
    assert (ApiKey.INIT_PRODUCER_ID, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE) == (22, 42, 47)
    assert ApiKey.DESCRIBE_CLUSTER == 60
    assert ApiKey(33).name == "ALTER_CONFIGS"


def test_a_key_is_its_number_on_the_wire_and_in_text():
    assert f"{ApiKey.HEARTBEAT}" == "12"
    assert {12: "heartbeat"}[ApiKey.HEARTBEAT] == "heartbeat"
