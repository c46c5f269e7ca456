"""Pure protocol code: Kafka framing, RecordBatch v2, the sidecar wire format.

Nothing in this package does I/O or imports trio: bytes in, values out.
"""
