"""Broker-side schema validation, Confluent Server's: a topic with
``confluent.value.schema.validation=true`` (or ``.key.``) takes only records whose value (key)
is in Confluent's wire format — magic byte 0, a 4-byte big-endian schema id, the payload —
with an id the registry knows, registered under the subject the topic's
``confluent.value.subject.name.strategy`` names:

- TopicNameStrategy (the default): ``{topic}-value`` / ``{topic}-key``
- RecordNameStrategy: the schema's record name (Avro: its full name; JSON Schema: its
  ``title``)
- TopicRecordNameStrategy: ``{topic}-{record name}``

A null value (a tombstone) or key passes.  The payload itself is not decoded: the id is the
contract, as in Confluent Server.  Pure: ``problems(...)`` returns the (batch index,
reason) of each refused record, which the Produce handler turns into INVALID_RECORD with
KIP-467 record errors (the whole batch is refused; the producer fails those records with
their reason and retries nothing).
"""

from __future__ import annotations

import json
import struct
from operator import itemgetter

from databus.protocol.records import decode_columns, iter_headers

MAGIC = 0
_HEAD = itemgetter(slice(0, 5))  # the magic byte and the schema id


def wanted(config) -> bool:
    """Whether a topic's LogConfig asks for validation at all."""
    return config.confluent_value_schema_validation or config.confluent_key_schema_validation


class Validator:
    def __init__(self, store) -> None:
        self.store = store

    def problems(self, topic: str, records: bytes, config) -> list[tuple[int, str]]:
        registry = self.store.read()
        out: list[tuple[int, str]] = []
        parts = [(part, strategy) for part, on, strategy in (
            ("value", config.confluent_value_schema_validation,
             config.confluent_value_subject_name_strategy),
            ("key", config.confluent_key_schema_validation,
             config.confluent_key_subject_name_strategy)) if on]
        # the records as columns (C where built: no object per record), then one verdict
        # per distinct header (the records of a batch mostly share one schema): per record
        # only a slice, in C (map), unless a header is refused
        columns: tuple[list, list, list, list, list] = ([], [], [], [], [])
        for pos, _header in iter_headers(records):
            decode_columns(records, pos, -(2**63), 2**63, columns)
        refused: dict[int, str] = {}
        for part, strategy in parts:
            column = columns[3] if part == "value" else columns[2]
            try:
                heads = set(map(_HEAD, column))
            except TypeError:  # a tombstone (None) among them: it passes
                heads = {data[:5] for data in column if data is not None}
            bad = {}
            for head in heads:
                reason = _check(registry, topic, part, bytes(head), strategy)
                if reason is not None:
                    bad[head] = reason
            if bad:
                for index, data in enumerate(column):
                    if data is not None and index not in refused:  # one reason a record
                        reason = bad.get(data[:5])
                        if reason is not None:
                            refused[index] = reason
        for index in sorted(refused):
            out.append((index, f"record {index} (offset delta {index}): {refused[index]}"))
        return out


def _check(registry, topic: str, part: str, data: bytes | None, strategy: str) -> str | None:
    if data is None:
        return None
    if len(data) < 5 or data[0] != MAGIC:
        return (f"the {part} does not start with the schema registry's magic byte 0 and a "
                f"schema id (topic {topic} has confluent.{part}.schema.validation=true)")
    (schema_id,) = struct.unpack_from(">I", data, 1)
    holders = registry.versions_with_id(schema_id, deleted=True)
    if not holders:
        return f"the {part} names schema id {schema_id}, which the registry does not know"
    if strategy == "TopicNameStrategy":
        subjects = {f"{topic}-{part}"}
    else:
        names = {_record_name(v) for v in holders} - {None}
        subjects = names if strategy == "RecordNameStrategy" else {f"{topic}-{n}"
                                                                   for n in names}
    if not any(v.subject in subjects for v in holders):
        wanted_subjects = ", ".join(sorted(subjects)) or "(a schema without a record name)"
        return (f"the {part}'s schema id {schema_id} is not registered under subject "
                f"{wanted_subjects} ({strategy})")
    return None


def _record_name(version) -> str | None:
    try:
        schema = json.loads(version.schema)
    except ValueError:
        return None
    if not isinstance(schema, dict):
        return None
    if version.schema_type == "JSON":
        title = schema.get("title")
        return title if isinstance(title, str) else None
    name = schema.get("name")
    if not isinstance(name, str):
        return None
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name
