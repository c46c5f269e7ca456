"""The app SDK: ``Client`` sends messages to streams through the local sidecar.

See databus/sdk/client.py for the threading model and backpressure, and
docs/sidecar-protocol.md for the wire format it speaks.
"""

from .client import Client, ClientStatistics, Delivery, DeliveryFuture, Transaction
from .consume import Message, Subscription
from .errors import (
    BufferExhaustedError,
    DatabusError,
    DeliveryError,
    InvalidRecordError,
    MessageTooLargeError,
    PluginFailedError,
    ProtocolError,
    ShuttingDownError,
    SidecarUnavailableError,
    StreamNotAllowedError,
    SubscriptionError,
    UnauthorizedError,
    UnknownStreamError,
)

__all__ = [
    "AsyncClient", "AsyncSubscription", "Client", "Message", "Subscription", "ClientStatistics", "Delivery", "DeliveryFuture", "DatabusError",
    "BufferExhaustedError",
    "DeliveryError", "InvalidRecordError", "MessageTooLargeError", "PluginFailedError", "ProtocolError",
    "ShuttingDownError", "SidecarUnavailableError", "StreamNotAllowedError",
    "SubscriptionError", "Transaction", "UnauthorizedError", "UnknownStreamError",
]


def __getattr__(name: str):
    # AsyncClient pulls in asyncio: only apps that use it pay for that import.
    if name in ("AsyncClient", "AsyncSubscription"):
        from . import aio

        return getattr(aio, name)
    raise AttributeError(f"module 'databus.sdk' has no attribute {name!r}")
