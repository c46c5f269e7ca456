"""The ``_schemas`` topic's records in Confluent's layout (so Confluent's registry or
Karapace can read a topic databus wrote, and the other way round).

Keys and values are JSON.  The key names what the record is about; compaction keeps the
last value of each key, so the key bytes must be the same for the same thing every time
(fields in Confluent's order, no spaces):

    SCHEMA  {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}
            -> {"subject":S,"version":V,"id":ID,"schemaType":T,"references":[...],
                "schema":TEXT,"deleted":false}     (schemaType left out for AVRO;
                deleted=true: soft-deleted; a null value: permanently deleted)
    CONFIG  {"keytype":"CONFIG","subject":S|null,"magic":0} -> {"compatibilityLevel":L}
            (null value: the subject's level removed)
    MODE    {"keytype":"MODE","subject":S|null,"magic":0} -> {"mode":M}
    DELETE_SUBJECT {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}
            -> {"subject":S,"version":V}: every version up to V soft-deleted
    CLEAR_SUBJECT  {"keytype":"CLEAR_SUBJECT","subject":S,"magic":0} -> {"subject":S}
    NOOP    {"keytype":"NOOP","magic":0}: written by Confluent's registry to find the log
            end; nothing to apply.

Pure functions, no I/O: ``encode_*`` build (key, value) bytes; ``decode`` turns one record
back into a ``Record`` for the registry to apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Record:
    keytype: str
    subject: str | None = None
    version: int | None = None
    value: dict | None = None  # None: a tombstone
    extra: dict = field(default_factory=dict)


def schema_key(subject: str, version: int) -> bytes:
    return _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def schema_value(subject: str, version: int, schema_id: int, schema_type: str, schema: str,
                 references: list[dict], deleted: bool = False) -> bytes:
    value: dict = {"subject": subject, "version": version, "id": schema_id}
    if schema_type != "AVRO":
        value["schemaType"] = schema_type
    if references:
        value["references"] = references
    value["schema"] = schema
    value["deleted"] = deleted
    return _dumps(value)


def config_key(subject: str | None) -> bytes:
    return _dumps({"keytype": "CONFIG", "subject": subject, "magic": 0})


def config_value(level: str | None) -> bytes | None:
    return None if level is None else _dumps({"compatibilityLevel": level})


def mode_key(subject: str | None) -> bytes:
    return _dumps({"keytype": "MODE", "subject": subject, "magic": 0})


def mode_value(mode: str | None) -> bytes | None:
    return None if mode is None else _dumps({"mode": mode})


def delete_subject_key(subject: str) -> bytes:
    return _dumps({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dumps({"subject": subject, "version": version})


class RecordError(ValueError):
    """A record of ``_schemas`` that is not in the layout above (skipped, with a log line)."""


def decode(key: bytes | None, value: bytes | None) -> Record:
    if key is None:
        raise RecordError("record without a key")
    try:
        k = json.loads(key)
        v = None if value is None else json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"not JSON: {exc}") from None
    if not isinstance(k, dict) or not isinstance(k.get("keytype"), str):
        raise RecordError(f"key without a keytype: {key[:200]!r}")
    if v is not None and not isinstance(v, dict):
        raise RecordError(f"value is not a JSON object: {value[:200]!r}")
    version = k.get("version")
    return Record(keytype=k["keytype"], subject=k.get("subject"),
                  version=version if isinstance(version, int) else None, value=v)
