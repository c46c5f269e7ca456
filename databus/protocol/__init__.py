"""Pure protocol code, and all of the project's Kafka wire knowledge: framing (framing.py, on
kio), the kio entity builder (entities.py), API keys (api_keys.py), error codes (errors.py),
the ConsumerProtocol blobs (consumer_protocol.py), the hand-framed Fetch response
(fetch_encoding.py), UNSUPPORTED_VERSION answers (unsupported.py), RecordBatch v2
(records.py, codecs.py, varint.py); and the sidecar's wire format (sidecar_wire.py).

Nothing in this package does I/O or imports trio: bytes in, values out.  The package itself
imports nothing, so the app SDK can load sidecar_wire without kio.
"""
