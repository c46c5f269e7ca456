"""The client's exceptions: one class per Kafka error code, plus the client-side failures.

Kafka's error table (code, name, retriable) is ``ErrorCode`` of databus/protocol/errors.py
(kio's), so the names and the retriable flag are Kafka's own.  ``for_code(code)`` returns
the exception class for a code; classes for the codes the client reacts to are named here
(``NotLeaderOrFollowerError``, ...) so callers can catch them; every other code gets a
generated subclass of KafkaError with Kafka's upper-case name.

Client-side failures that have no broker error code: BufferExhaustedError (``buffer.memory``
stayed full for ``max.block.ms``), DeliveryTimeoutError (``delivery.timeout.ms`` expired),
KafkaConnectionError (socket closed/refused), AuthenticationError (a refused login or TLS
handshake: SaslAuthenticationFailedError, SslAuthenticationError), RequestTimedOutError (no answer within
``request.timeout.ms``), ConfigError (bad configuration key or value).
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode, error_name


class KafkaError(Exception):
    """Base of every client error.  ``code`` is Kafka's error code (-1 when there is none)."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r})"


def _class_name(code_name: str) -> str:
    parts = code_name.split("_")
    base = "".join(p.capitalize() for p in parts)
    return base if base.endswith(("Error", "Exception")) else base + "Error"


class AuthenticationError(KafkaError):
    """The broker refused who this client is (Java's AuthenticationException): a refused SASL
    login (SaslAuthenticationFailedError, Kafka error 58) or a failed TLS handshake
    (SslAuthenticationError).  Not retriable for a caller: retrying the same credentials
    gets the same answer, so calls raise it at once; the client's background tasks still
    reconnect (``reconnect.backoff.ms``), so a fixed credential is picked up."""

    name = "AUTHENTICATION_FAILED"


_BY_CODE: dict[int, type[KafkaError]] = {}


def _define(code: ErrorCode) -> type[KafkaError]:
    cls = type(
        _class_name(code.name),
        (AuthenticationError if code is ErrorCode.sasl_authentication_failed else KafkaError,),
        {"code": int(code), "name": error_name(code), "retriable": bool(code.retriable),
         "__doc__": f"Kafka error {int(code)} {error_name(code)}."},
    )
    _BY_CODE[int(code)] = cls
    return cls


for _code in ErrorCode:
    if _code is not ErrorCode.none:
        _define(_code)


def for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code (KafkaError itself for unknown codes)."""
    return _BY_CODE.get(int(code), KafkaError)


def from_code(code: int, detail: str | None = None) -> KafkaError:
    cls = for_code(code)
    name = cls.name if cls is not KafkaError else f"error code {int(code)}"
    return cls(f"{name}: {detail}" if detail else name)


def raise_for_code(code: int, detail: str | None = None) -> None:
    if code:
        raise from_code(code, detail)


# Named handles for the codes the client branches on (generated above, re-exported here).
UnknownServerError = _BY_CODE[ErrorCode.unknown_server_error]
OffsetOutOfRangeError = _BY_CODE[ErrorCode.offset_out_of_range]
CorruptMessageError = _BY_CODE[ErrorCode.corrupt_message]
UnknownTopicOrPartitionError = _BY_CODE[ErrorCode.unknown_topic_or_partition]
LeaderNotAvailableError = _BY_CODE[ErrorCode.leader_not_available]
NotLeaderOrFollowerError = _BY_CODE[ErrorCode.not_leader_or_follower]
RequestTimedOutError = _BY_CODE[ErrorCode.request_timed_out]
MessageTooLargeError = _BY_CODE[ErrorCode.message_too_large]
NetworkExceptionError = _BY_CODE[ErrorCode.network_exception]
CoordinatorLoadInProgressError = _BY_CODE[ErrorCode.coordinator_load_in_progress]
CoordinatorNotAvailableError = _BY_CODE[ErrorCode.coordinator_not_available]
NotCoordinatorError = _BY_CODE[ErrorCode.not_coordinator]
IllegalGenerationError = _BY_CODE[ErrorCode.illegal_generation]
UnknownMemberIdError = _BY_CODE[ErrorCode.unknown_member_id]
RebalanceInProgressError = _BY_CODE[ErrorCode.rebalance_in_progress]
TopicAlreadyExistsError = _BY_CODE[ErrorCode.topic_already_exists]
UnsupportedVersionError = _BY_CODE[ErrorCode.unsupported_version]
OutOfOrderSequenceNumberError = _BY_CODE[ErrorCode.out_of_order_sequence_number]
DuplicateSequenceNumberError = _BY_CODE[ErrorCode.duplicate_sequence_number]
InvalidProducerEpochError = _BY_CODE[ErrorCode.invalid_producer_epoch]
UnknownProducerIdError = _BY_CODE[ErrorCode.unknown_producer_id]
MemberIdRequiredError = _BY_CODE[ErrorCode.member_id_required]
FencedInstanceIdError = _BY_CODE[ErrorCode.fenced_instance_id]
SaslAuthenticationFailedError = _BY_CODE[ErrorCode.sasl_authentication_failed]


class KafkaConnectionError(KafkaError):
    """The connection to a broker failed or was closed (retriable, like NETWORK_EXCEPTION)."""

    code = ErrorCode.network_exception
    name = "NETWORK_EXCEPTION"
    retriable = True


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed on a certificate or protocol check (Java's
    SslAuthenticationException): e.g. the broker's certificate is not trusted or does not
    name the host, or the broker refused this client's certificate."""

    name = "SSL_AUTHENTICATION_FAILED"


class BufferExhaustedError(KafkaError):
    """``buffer.memory`` stayed full for ``max.block.ms``; the record was not queued."""

    name = "BUFFER_EXHAUSTED"


class DeliveryTimeoutError(KafkaError):
    """The record was not acknowledged within ``delivery.timeout.ms``."""

    code = ErrorCode.request_timed_out
    name = "DELIVERY_TIMEOUT"


class ProducerClosedError(KafkaError):
    """send() after the producer was closed."""

    name = "PRODUCER_CLOSED"


class ConsumerClosedError(KafkaError):
    name = "CONSUMER_CLOSED"


class IllegalStateError(KafkaError):
    """A call that the client's state does not allow (Java's IllegalStateException): e.g.
    acknowledging, in explicit mode, a record the share consumer did not hand out."""

    name = "ILLEGAL_STATE"
class DecompressedBatchTooLargeError(CorruptMessageError):
    """A fetched batch decompresses to more than ``max.decompressed.batch.bytes`` (a
    decompression bomb, or a batch bigger than this consumer accepts); the message names
    topic, partition and offset.  A CorruptMessageError: handled as one."""


class ConfigError(KafkaError, ValueError):
    """An unknown configuration key or an invalid value; the message names the key."""

    name = "INVALID_CONFIG"
    code = ErrorCode.invalid_config


class NoOffsetForPartitionError(KafkaError):
    """``auto.offset.reset=none`` and the group has no committed offset for a partition."""

    name = "NO_OFFSET_FOR_PARTITION"
ProducerFencedError = _BY_CODE[ErrorCode.producer_fenced]
