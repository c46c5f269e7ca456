"""Errors raised by the storage engine, each carrying the Kafka error code it maps to.

The broker turns any of these into a response with ``kafka_error_code(exc)``.  Batch-format
errors (``CorruptRecordError``, ``RecordTooLargeError``) belong to ``protocol/records.py``
and are re-exported here so that storage callers need one import.
"""

from __future__ import annotations

from databus.protocol.records import CorruptRecordError, RecordTooLargeError

__all__ = [
    "CorruptRecordError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "RecordValidationError",
    "StorageError",
    "TopicExistsError",
    "UnknownTopicError",
    "kafka_error_code",
]

# Kafka's error codes (org.apache.kafka.common.protocol.Errors)
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_CONFIG = 40
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87
UNKNOWN_SERVER_ERROR = -1


class StorageError(Exception):
    """Base of the storage engine's own errors."""

    error_code = UNKNOWN_SERVER_ERROR


class KafkaStorageError(StorageError):
    """An I/O error on the data directory (disk full, read-only, fsync failed).

    Nothing half-written stays visible when an append raises this.
    """

    error_code = KAFKA_STORAGE_ERROR


class OffsetOutOfRangeError(StorageError):
    error_code = OFFSET_OUT_OF_RANGE


class InvalidRecordError(CorruptRecordError):
    """A batch that is intact but breaks a rule (no records, count vs offsets, offset order)."""

    error_code = INVALID_RECORD


class RecordValidationError(InvalidRecordError):
    """Records that break a rule of their topic (a record without a key on a compacted topic).

    ``record_errors`` lists ``(batch_index, message)`` for each offending record, the index
    counting records from the first of the append; Produce v8+ returns them (KIP-467) so
    the producer can tell the bad records from the good ones failed with them.
    """

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidConfigError(StorageError, ValueError):
    error_code = INVALID_CONFIG


class TopicExistsError(StorageError):
    error_code = TOPIC_ALREADY_EXISTS


class UnknownTopicError(StorageError, KeyError):
    error_code = UNKNOWN_TOPIC_OR_PARTITION

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InvalidTopicError(StorageError, ValueError):
    error_code = INVALID_TOPIC_EXCEPTION


class InvalidPartitionsError(StorageError, ValueError):
    error_code = INVALID_PARTITIONS


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not follow its last sequence (a gap)."""

    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """An idempotent producer's batch carries an epoch older than the one last seen."""

    error_code = INVALID_PRODUCER_EPOCH


def kafka_error_code(exc: BaseException) -> int:
    """The Kafka error code for an exception raised by the storage engine."""
    if isinstance(exc, InvalidRecordError):
        return INVALID_RECORD
    if isinstance(exc, StorageError):
        return exc.error_code
    if isinstance(exc, RecordTooLargeError):
        return MESSAGE_TOO_LARGE
    if isinstance(exc, CorruptRecordError):
        return CORRUPT_MESSAGE
    if isinstance(exc, OSError):
        return KAFKA_STORAGE_ERROR
    return UNKNOWN_SERVER_ERROR
