"""Exceptions -> Kafka error codes for responses.

Storage errors carry their code (``databus.storage.errors.kafka_error_code``); the broker
adds its own (a failed group-commit fsync is KAFKA_STORAGE_ERROR).
"""

from __future__ import annotations

from databus.protocol.errors import ErrorCode
from databus.storage.errors import kafka_error_code

from .durability import DurabilityError


def error_code_for(exc: BaseException) -> ErrorCode:
    if isinstance(exc, DurabilityError):
        return ErrorCode.kafka_storage_error
    return ErrorCode(kafka_error_code(exc))
