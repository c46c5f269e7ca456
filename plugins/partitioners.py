"""Built-in partitioner plugins: Kafka's (default, murmur2, round_robin, random) and ``field``.

Registered through the ``databus`` entry-point group like any third-party plugin.  Kafka's
partitioners are the client's own (``databus.client.partitioners``), so the sidecar places
keyed messages exactly where a Java producer would.

``field`` hashes one field of the message *value* instead of the key, for apps that send
JSON or msgpack documents without a key: ``partitioner.config: {field: customer_id}``.  The
field's value is hashed like a Java key (murmur2 of its bytes: str as UTF-8, bytes as is,
numbers and booleans as their JSON text), so a value field ``"c-42"`` lands where key
``b"c-42"`` would.  A dotted name (``customer.id``) reaches into nested maps.  Messages
whose value lacks the field (or does not decode) fall back to the key's hash, and without a
key to a random partition.
"""

from __future__ import annotations

import json
import random

import msgpack

from databus import hookimpl
from databus.client.partitioners import PARTITIONERS, murmur2_partition

FIELD_FORMATS = ("auto", "json", "msgpack")


@hookimpl
def databus_partitioner_names():
    return [*PARTITIONERS, "field"]


@hookimpl
def databus_partitioner(name, config):
    if name in PARTITIONERS:
        if config:
            raise ValueError(f"partitioner {name!r} takes no partitioner.config")
        return PARTITIONERS[name]()
    if name == "field":
        return FieldPartitioner.from_config(config)
    return None


class FieldPartitioner:
    """``partition(topic, key, value, n)`` by a field of a JSON or msgpack value."""

    def __init__(self, field: str, fmt: str = "auto", rng: random.Random | None = None) -> None:
        self.path = field.split(".")
        self.format = fmt
        self._rng = rng or random.Random()

    @classmethod
    def from_config(cls, config: dict) -> FieldPartitioner:
        unknown = set(config) - {"field", "format"}
        if unknown:
            raise ValueError(f"field partitioner: unknown option(s) {', '.join(sorted(unknown))}")
        field = config.get("field")
        if not isinstance(field, str) or not field:
            raise ValueError("field partitioner needs partitioner.config.field (a field name)")
        fmt = config.get("format", "auto")
        if fmt not in FIELD_FORMATS:
            raise ValueError(f"field partitioner: format must be one of {', '.join(FIELD_FORMATS)}")
        return cls(field, fmt)

    def field_bytes(self, value: bytes | None) -> bytes | None:
        """The bytes to hash for ``value``, or None when the field is absent."""
        if not value:
            return None
        doc = self._decode(value)
        for part in self.path:
            if not isinstance(doc, dict) or part not in doc:
                return None
            doc = doc[part]
        if doc is None:
            return None
        if isinstance(doc, bytes):
            return doc
        if isinstance(doc, str):
            return doc.encode()
        if isinstance(doc, (bool, int, float)):
            return json.dumps(doc).encode()
        return None

    def _decode(self, value: bytes):
        fmt = self.format
        if fmt == "auto":
            # A JSON document starts with '{' (0x7b), which in msgpack is the positive
            # fixint 123, never a whole map: the first byte tells the formats apart.
            fmt = "json" if value.lstrip()[:1] == b"{" else "msgpack"
        try:
            if fmt == "json":
                return json.loads(value)
            return msgpack.unpackb(value, raw=False, strict_map_key=False)
        except Exception:
            return None

    def __call__(self, topic: str, key: bytes | None, value: bytes | None, n: int) -> int:
        data = self.field_bytes(value)
        if data is None:
            data = key
        if data is None:
            return self._rng.randrange(n)
        return murmur2_partition(data, n)
