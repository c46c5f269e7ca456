"""``format: registry``: values in Confluent's wire format (magic byte 0, the 4-byte schema
id, the Avro, JSON or Protobuf body — what AvroSerializer / JSONSerializer /
ProtobufSerializer and typed streams write; Protobuf: the file's first message),
each decoded with the schema its id names, fetched once (ids never change); and the
index's value paths checked against each topic's subject ``TOPIC-value``
(TopicNameStrategy), latest version: a path the schema lacks is said once in the log.

Blocking HTTP (databus.schemas.client): called in the sink's worker threads.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from databus.schemas.client import RegistryClient, RegistryRefused
from databus.schemas.serde import Codec, field_paths, header

log = logging.getLogger("databus_plugins.index")

DEFAULT_REGISTRY = "http://127.0.0.1:8081"


class RegistryValues:
    def __init__(self, url: str | None) -> None:
        self.client = RegistryClient(url or DEFAULT_REGISTRY)
        self._codecs: dict[int, Codec | None] = {}  # None: the registry has no such id
        self._checked: set[str] = set()
        self._lock = threading.Lock()

    def decode(self, value: bytes) -> Any:
        """The value decoded; ValueError (counted undecodable) if it is not in the wire
        format or names an id the registry does not have.  RegistryUnavailable goes up:
        the sink stops and restarts from its committed offsets, losing nothing."""
        schema_id = header(value)
        codec = self._codecs.get(schema_id, False)
        if codec is False:
            try:
                answer = self.client.schema(schema_id)
                codec = Codec(schema_id, answer.get("schemaType") or "AVRO", answer["schema"])
            except (RegistryRefused, ValueError):  # (ValueError: a schema Codec cannot read)
                codec = None
            with self._lock:
                self._codecs[schema_id] = codec
        if codec is None:
            raise ValueError(f"schema id {schema_id} is not in the registry (or not one typed values read)")
        try:
            return codec.decode(value)
        except Exception as exc:  # a body its schema does not read: a value like any other
            raise ValueError(f"schema id {schema_id}: {exc}") from None  # that does not decode

    def check_paths(self, index: str, topic: str, fields: dict[str, tuple[str, ...]]) -> None:
        """Log once per topic the value paths its subject's latest version lacks."""
        if topic in self._checked:
            return
        self._checked.add(topic)
        subject = f"{topic}-value"
        try:
            latest = self.client.latest(subject)
        except RegistryRefused as exc:
            log.warning("index %s: topic %s: no subject %s to check the fields against (%s)",
                        index, topic, subject, exc)
            return
        known = field_paths(latest.get("schemaType") or "AVRO", latest["schema"])
        for name, path in fields.items():
            if path not in known:
                log.warning("index %s: field %s (value.%s) is not in subject %s version %s: "
                            "its records will count it missing", index, name, ".".join(path),
                            subject, latest.get("version"))
