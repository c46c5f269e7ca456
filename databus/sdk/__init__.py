"""The app SDK: ``Client`` sends messages to streams through the local sidecar.

See databus/sdk/client.py for the threading model and backpressure, and
docs/sidecar-protocol.md for the wire format it speaks.
"""

from .client import Client, Delivery, DeliveryFuture
from .errors import (
    BufferExhaustedError,
    DatabusError,
    DeliveryError,
    MessageTooLargeError,
    PluginFailedError,
    ProtocolError,
    ShuttingDownError,
    SidecarUnavailableError,
    UnknownStreamError,
)

__all__ = [
    "Client", "Delivery", "DeliveryFuture", "DatabusError", "BufferExhaustedError",
    "DeliveryError", "MessageTooLargeError", "PluginFailedError", "ProtocolError",
    "ShuttingDownError", "SidecarUnavailableError", "UnknownStreamError",
]
