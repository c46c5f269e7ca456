"""databus: a message bus with a per-host sidecar and a built-in Kafka-compatible broker.

The app-facing SDK (``databus.Client``) arrives with the sidecar; until then this package
exposes only its version.
"""

__version__ = "0.1.0"
