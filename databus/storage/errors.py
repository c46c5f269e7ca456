"""Errors raised by the storage engine, each carrying the Kafka error code it maps to
(named through databus/protocol/errors.py, Kafka's one table).

The broker turns any of these into a response with ``kafka_error_code(exc)``.  Batch-format
errors (``CorruptRecordError``, ``RecordTooLargeError``) belong to ``protocol/records.py``
and are re-exported here so that storage callers need one import.
"""

from __future__ import annotations

from databus.protocol.errors import ErrorCode
from databus.protocol.records import CorruptRecordError, RecordTooLargeError

__all__ = [
    "CorruptRecordError",
    "DamagedSegmentError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PolicyViolationError",
    "RecordTooLargeError",
    "RecordValidationError",
    "StorageError",
    "TopicExistsError",
    "UnknownTopicError",
    "kafka_error_code",
]


class StorageError(Exception):
    """Base of the storage engine's own errors."""

    error_code = ErrorCode.unknown_server_error


class KafkaStorageError(StorageError):
    """An I/O error on the data directory (disk full, read-only, fsync failed).

    Nothing half-written stays visible when an append raises this.
    """

    errno: int | None = None  # the OSError's, when one caused it

    error_code = ErrorCode.kafka_storage_error


class DamagedSegmentError(StorageError):
    """A read met bytes that are not a batch inside a segment (flipped length, torn write in
    an old segment).  Kafka answers the fetch with CORRUPT_MESSAGE; the batches before the
    damage are still served.  The partition log logs it once per segment and position;
    ``databus repair-log`` cuts the damaged range out."""

    error_code = ErrorCode.corrupt_message

    def __init__(self, segment, position: int, reason: str) -> None:
        super().__init__(f"{segment.log_path}: damaged batch at byte {position}: {reason}")
        self.path = segment.log_path
        self.position = position


class OffsetOutOfRangeError(StorageError):
    error_code = ErrorCode.offset_out_of_range


class InvalidRecordError(CorruptRecordError):
    """A batch that is intact but breaks a rule (no records, count vs offsets, offset order)."""

    error_code = ErrorCode.invalid_record


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
    error_code = ErrorCode.invalid_config


class TopicExistsError(StorageError):
    error_code = ErrorCode.topic_already_exists


class UnknownTopicError(StorageError, KeyError):
    error_code = ErrorCode.unknown_topic_or_partition

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InvalidTopicError(StorageError, ValueError):
    error_code = ErrorCode.invalid_topic_exception


class InvalidPartitionsError(StorageError, ValueError):
    error_code = ErrorCode.invalid_partitions


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not follow its last sequence (a gap)."""

    error_code = ErrorCode.out_of_order_sequence_number


class PolicyViolationError(StorageError):
    """An operation the topic's configuration forbids (DeleteRecords on a compact-only topic)."""

    error_code = ErrorCode.policy_violation


class InvalidProducerEpochError(StorageError):
    """An idempotent producer's batch carries an epoch older than the one last seen."""

    error_code = ErrorCode.invalid_producer_epoch


def kafka_error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised by the storage engine."""
    if isinstance(exc, InvalidRecordError):
        return ErrorCode.invalid_record
    if isinstance(exc, StorageError):
        return exc.error_code
    if isinstance(exc, RecordTooLargeError):
        return ErrorCode.message_too_large
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.corrupt_message
    if isinstance(exc, OSError):
        return ErrorCode.kafka_storage_error
    return ErrorCode.unknown_server_error
