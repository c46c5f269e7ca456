"""The SDK's exceptions: one class per kind of failure, each carrying the sidecar's code.

Codes are the wire protocol's (databus.protocol.sidecar_wire.ErrorCode): Kafka's own error
codes for upstream failures, 1000 and above for the sidecar's.  ``error_for(code, message)``
builds the right subclass from a report.
"""

from __future__ import annotations

from databus.protocol.sidecar_wire import ErrorCode, error_name


class DatabusError(Exception):
    """Base of every SDK error; ``code`` is the sidecar's (or Kafka's) code, ``name`` its
    upper-case name."""

    def __init__(self, code: int, message: str) -> None:
        self.code = int(code)
        self.name = error_name(self.code)
        super().__init__(f"{self.name} ({self.code}): {message}")
        self.detail = message


class UnknownStreamError(DatabusError):
    """The stream is not in the sidecar's config and there is no default route."""


class BufferExhaustedError(DatabusError):
    """The sidecar's (or this client's) buffer stayed full for max.block.ms; not sent."""


class MessageTooLargeError(DatabusError):
    """The message exceeds buffer.memory or the cluster's max.request.size."""


class PluginFailedError(DatabusError):
    """A plugin (route or partitioner) raised for this message; the message names it."""


class ShuttingDownError(DatabusError):
    """The sidecar is stopping and did not take the message."""


class UnauthorizedError(DatabusError):
    """The sidecar needs a token (``sidecar.tokens``) and this client gave none or a wrong
    one (``Client(token=...)`` / $DATABUS_TOKEN)."""


class StreamNotAllowedError(DatabusError):
    """This app's token does not allow sending to the stream; not sent."""


class ProtocolError(DatabusError):
    """The sidecar rejected this client's bytes and closed the connection."""


class DeliveryError(DatabusError):
    """Upstream Kafka refused or lost the message (``code`` is Kafka's error code)."""


class InvalidRecordError(DatabusError):
    """A typed stream's schema does not take the value (INVALID_RECORD, Kafka's code): the
    message names the field and the rule it broke (docs/schemas.md, "Typed streams")."""


class SubscriptionError(DatabusError):
    """The sidecar refused or ended a subscription (INVALID_SUBSCRIPTION: the group consumes
    another stream or other tags on this host; UNKNOWN_SUBSCRIPTION)."""


class SidecarUnavailableError(DatabusError):
    """No connection to the sidecar (not running, socket missing, or connection lost)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)
        self.name = "SIDECAR_UNAVAILABLE"
        self.args = (f"SIDECAR_UNAVAILABLE: {message}",)


_BY_CODE: dict[int, type[DatabusError]] = {
    ErrorCode.UNKNOWN_STREAM: UnknownStreamError,
    ErrorCode.BUFFER_EXHAUSTED: BufferExhaustedError,
    ErrorCode.MESSAGE_TOO_LARGE: MessageTooLargeError,
    ErrorCode.PLUGIN_ERROR: PluginFailedError,
    ErrorCode.SHUTTING_DOWN: ShuttingDownError,
    ErrorCode.MALFORMED_FRAME: ProtocolError,
    ErrorCode.FRAME_TOO_LARGE: ProtocolError,
    ErrorCode.HELLO_REQUIRED: ProtocolError,
    ErrorCode.UNSUPPORTED_VERSION: ProtocolError,
    ErrorCode.INVALID_MESSAGE: ProtocolError,
    ErrorCode.INVALID_SUBSCRIPTION: SubscriptionError,
    ErrorCode.UNKNOWN_SUBSCRIPTION: SubscriptionError,
    ErrorCode.UNAUTHORIZED: UnauthorizedError,
    ErrorCode.STREAM_NOT_ALLOWED: StreamNotAllowedError,
    ErrorCode.INVALID_RECORD: InvalidRecordError,
}


def error_for(code: int, message: str) -> DatabusError:
    return _BY_CODE.get(code, DeliveryError)(code, message)
