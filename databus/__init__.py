"""databus: a message bus with a per-host sidecar and a built-in Kafka-compatible broker.

The app-facing SDK::

    from databus import Client

    with Client() as client:                      # the local sidecar's default socket
        future = client.send("orders", b'{"id": 1}', key=b"customer-7")
        delivery = future.result(timeout=10)      # Delivery(topic, partition, offset, timestamp)

asyncio apps use ``databus.AsyncClient`` (``await client.send_and_wait(...)``).  Errors are
``databus.DatabusError`` subclasses carrying the sidecar's code.  Plugin authors decorate
their hooks with ``databus.hookimpl`` (docs/plugins.md).  These names are imported lazily,
so that ``databus --help`` and the broker do not pay for the SDK, nor apps for pluggy.
"""

from .version import __version__

_SDK_NAMES = {
    "AsyncClient", "AsyncSubscription", "Client", "Message", "Subscription", "ClientStatistics", "Delivery", "DeliveryFuture", "DatabusError",
    "BufferExhaustedError",
    "DeliveryError", "InvalidRecordError", "MessageTooLargeError", "PluginFailedError", "ProtocolError",
    "ShuttingDownError", "SidecarUnavailableError", "StreamNotAllowedError",
    "SubscriptionError", "Transaction", "UnauthorizedError", "UnknownStreamError",
}

__all__ = ["__version__", "hookimpl", *sorted(_SDK_NAMES)]


def __getattr__(name: str):
    if name in _SDK_NAMES:
        from . import sdk

        return getattr(sdk, name)
    if name == "hookimpl":
        from .hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'databus' has no attribute {name!r}")


def __dir__():
    return __all__
