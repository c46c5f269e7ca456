"""Kafka's error codes have one table (protocol/errors.py); the sidecar wire format's copy of
the few it sends must agree with it."""

from __future__ import annotations

from databus.protocol import sidecar_wire
from databus.protocol.errors import ErrorCode, error_name


def test_kafka_names_upper_case():
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(ErrorCode.unknown_server_error) == "UNKNOWN_SERVER_ERROR"
    assert error_name(87) == "INVALID_RECORD"
    assert error_name(99999) == "UNKNOWN_99999"


def test_the_sidecar_wire_kafka_codes_are_kafkas():
    kafka = [code for code in sidecar_wire.ErrorCode if code < 1000]
    assert len(kafka) >= 5
    for code in kafka:
        assert ErrorCode[code.name.lower()] == code, code.name
