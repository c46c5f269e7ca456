"""Columns from a schema registry, for the sinks that write Arrow (the parquet and iceberg
plugins both import it: one home): values in Confluent's wire format (magic byte 0, a 4-byte
big-endian schema id, then the Avro, JSON or Protobuf payload: protobuf_values.py) decoded into the columns of the
subject ``{topic}-value`` (TopicNameStrategy), latest version.  A client of the registry's
REST API (any Confluent-compatible registry, or the broker's own, databus/schemas/http.py);
needs pyarrow, so only the sinks import it.

The columns follow the subject as it evolves, never losing a field:

* a record written with the latest version, or an earlier one, is decoded with its own
  (writer) schema and laid on the columns by name; a field its version lacks is null;
* a record naming a version newer than the columns asks the registry for the latest
  version again: if that only adds optional fields (a union with null, or a default; JSON
  Schema: not required), they become new columns (logged once) and the files written from
  then on have them — earlier files read them as null;
* with ``promote`` (a table, which can change in place), a type change Iceberg allows
  (int -> long, float -> double, a decimal's precision up) widens the column, and a field
  the new version removed stays a column (its new rows null);
* any other change (a field removed, renamed or retyped, a required field added) raises
  ``IncompatibleSchemaError`` before anything of the batch is kept: the sink stops with
  that named error and no offset is committed past the record;
* a record not in the wire format, naming an id the registry does not know, or an id that
  is not a version of the subject goes to the dead-letter topic with the reason.

Blocking HTTP (client.py, shared with the registry's other readers): the sinks call it in
their worker threads.
"""

from __future__ import annotations

import io
import json
import logging
import struct
import urllib.parse
from typing import Any

import pyarrow as pa

from .client import RegistryClient, RegistryRefused, RegistryUnavailable

log = logging.getLogger("databus.schemas.columns")

_HEADER = struct.Struct(">bI")


class IncompatibleSchemaError(Exception):
    """The subject changed in a way the sink's columns cannot follow without losing data."""


class RegistryError(Exception):
    """The registry could not answer (down, or the subject does not exist)."""


class _Client:
    """The registry's answers this module needs, over the shared client (client.py), its
    errors as ``RegistryError`` (the message keeps Confluent's error code)."""

    def __init__(self, url: str) -> None:
        self.api = RegistryClient(url, timeout=30)
        self.by_id: dict[int, dict] = {}

    def get(self, path: str) -> Any:
        try:
            return self.api.call(path)
        except RegistryRefused as exc:
            raise RegistryError(f"{self.api.url}{path}: {exc}") from None
        except RegistryUnavailable as exc:
            raise RegistryError(f"{path}: {exc}") from None

    def latest(self, subject: str) -> dict:
        return self.get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")

    def schema(self, schema_id: int) -> dict:
        """{schemaType, schema} of an id (cached: ids never change)."""
        known = self.by_id.get(schema_id)
        if known is None:
            known = self.by_id[schema_id] = self.get(f"/schemas/ids/{schema_id}")
        return known

    def versions_of(self, schema_id: int) -> list[dict]:
        return self.get(f"/schemas/ids/{schema_id}/versions")


def has_subject(url: str, subject: str) -> bool:
    """Whether the registry has the subject (raises RegistryError when it cannot say)."""
    try:
        _Client(url).latest(subject)
    except RegistryError as exc:
        if "40401" in str(exc):
            return False
        raise
    return True


class _Version:
    """One schema of the subject: its parsed form, decoder and Arrow fields."""

    def __init__(self, schema_type: str, text: str, who: str) -> None:
        self.type = schema_type
        if schema_type == "PROTOBUF":
            from .protobuf_values import ProtobufError, ProtobufValues

            try:
                values = ProtobufValues(text, who)
            except ProtobufError as exc:
                raise RegistryError(f"the value schema cannot give columns: {exc}") from None
            self.fields, self._reader = values.fields, values.read
            return
        obj = json.loads(text)
        if schema_type == "AVRO":
            self.fields = avro_fields(obj, who)
            self._reader = _avro_reader(obj)
        elif schema_type == "JSON":
            self.fields = json_schema_fields(obj, who)
            self._reader = None
        else:
            raise RegistryError(f"{schema_type} schemas are not supported by the {who} sink "
                                "(Avro, JSON Schema and Protobuf are)")

    def decode(self, payload: bytes) -> dict:
        value = json.loads(payload) if self._reader is None else self._reader(payload)
        if not isinstance(value, dict):
            raise ValueError(f"not a record/object but {type(value).__name__}")
        return value


class SubjectDecoder:
    """Values of a topic in Confluent's wire format -> Arrow columns of ``{topic}-value``.

    ``who`` names the sink in log lines and errors; ``promote`` is whether a new version
    may widen a column the way Iceberg allows (int -> long, float -> double, a decimal's
    precision up) and keep a field the new version removed (its rows then null): a table
    can follow that, a directory of Parquet files read together cannot."""

    def __init__(self, url: str, topic: str, who: str, *, promote: bool = False,
                 schema_type: str | None = None) -> None:
        self.client = _Client(url)
        self.topic = topic
        self.who = who
        self.promote = promote
        self.schema_type = schema_type  # AVRO | JSON | PROTOBUF, or None for any
        self.subject = f"{topic}-value"
        self.schema: pa.Schema | None = None  # the columns, once the subject is read
        self.version = 0  # the subject version the columns follow
        self.versions: dict[int, _Version] = {}  # by schema id, for this subject only
        self.others: set[int] = set()  # ids known not to be versions of the subject

    def follow_latest(self) -> None:
        """Read the subject's latest version into the columns (IncompatibleSchemaError when
        they cannot follow it; RegistryError when the registry cannot say)."""
        latest = self.client.latest(self.subject)
        schema_type = latest.get("schemaType", "AVRO")
        if self.schema_type is not None and schema_type != self.schema_type:
            raise RegistryError(f"subject {self.subject} holds {schema_type} schemas, not "
                                f"{self.schema_type} (the sink's format)")
        version = _Version(schema_type, latest["schema"], self.who)
        self.versions[latest["id"]] = version
        schema = pa.schema([f for f, _ in version.fields])
        if self.schema is not None:
            schema = _evolved(self.subject, self.version, latest["version"], self.schema,
                              version.fields, self.who, self.promote)
            new = [f for f in schema if f.name not in self.schema.names]
            if new:
                log.warning("%s: %s: subject %s version %d adds field(s) %s: new "
                            "column(s); earlier rows read them as null", self.who, self.topic,
                            self.subject, latest["version"],
                            ", ".join(f"{f.name} ({f.type})" for f in new))
        self.schema = schema
        self.version = latest["version"]

    def _version_of(self, schema_id: int) -> _Version | str:
        """The version a record's id names, or the reason it cannot be read."""
        if schema_id in self.versions:
            return self.versions[schema_id]
        if schema_id in self.others:
            return f"schema id {schema_id} is not a version of subject {self.subject}"
        try:
            found = self.client.schema(schema_id)
            versions = self.client.versions_of(schema_id)
        except RegistryError as exc:
            if "40403" in str(exc):
                return f"schema id {schema_id} is not in the registry"
            raise
        mine = [v["version"] for v in versions if v["subject"] == self.subject]
        if not mine:
            self.others.add(schema_id)
            return f"schema id {schema_id} is not a version of subject {self.subject}"
        if max(mine) > self.version:
            self.follow_latest()  # raises IncompatibleSchemaError when it cannot follow
        if schema_id not in self.versions:
            self.versions[schema_id] = _Version(found.get("schemaType", "AVRO"),
                                                found["schema"], self.who)
        return self.versions[schema_id]

    def decode(self, records, values) -> tuple[list[int] | None, pa.Table, list]:
        """(indexes of the records decoded, None for all; their columns; [(record, reason)]
        of the others).  ``values[i]`` None is a tombstone: a row of nulls."""
        if self.schema is None:
            self.follow_latest()
        assert self.schema is not None
        rows: list[dict] = []
        good: list[int] = []
        rejected: list[tuple[Any, str]] = []
        for i, (record, value) in enumerate(zip(records, values)):
            if value is None:
                rows.append({})
                good.append(i)
                continue
            if len(value) < 5 or value[0] != 0:
                rejected.append((record, "value is not in Confluent's wire format (magic byte "
                                         "0 and a 4-byte schema id)"))
                continue
            version = self._version_of(_HEADER.unpack_from(value)[1])
            if isinstance(version, str):
                rejected.append((record, version))
                continue
            try:
                rows.append(version.decode(value[5:]))
            except Exception as exc:  # a payload its schema does not read: the record's fault
                reason = " ".join(str(exc).split()) or type(exc).__name__
                rejected.append((record, f"value does not decode with its schema: {reason}"))
                continue
            extra = set(rows[-1]).difference(self.schema.names)
            if extra:  # JSON Schema allows more properties; a column must not drop them
                rows.pop()
                rejected.append((record, f"field(s) {', '.join(sorted(extra))} not in subject "
                                         f"{self.subject} version {self.version}"))
                continue
            good.append(i)
        # Rows of several versions: by name onto the columns (a missing field is null).
        table = pa.Table.from_pylist(rows, schema=self.schema)
        return (None if len(good) == len(records) else good), table, rejected


# Iceberg's allowed promotions (a column's type -> a wider one), for ``promote``.
_PROMOTIONS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    if (old, new) in _PROMOTIONS:
        return True
    return (pa.types.is_decimal(old) and pa.types.is_decimal(new) and old.scale == new.scale
            and new.precision >= old.precision)


def _evolved(subject: str, old_version: int, new_version: int, columns: pa.Schema,
             new_fields: list[tuple[pa.Field, bool]], who: str, promote: bool) -> pa.Schema:
    """The columns after the subject's new version (the old ones in their order, then the
    new ones), or IncompatibleSchemaError naming every field they cannot follow."""
    new = {f.name: (f, optional) for f, optional in new_fields}
    problems, out = [], []
    for column in columns:
        if column.name not in new:
            if not promote:
                problems.append(f"field {column.name} removed")
            out.append(column)  # kept: its new rows are null
        elif not new[column.name][0].type.equals(column.type):
            wider = new[column.name][0].type
            if promote and _widens(column.type, wider):
                out.append(column.with_type(wider))
            else:
                problems.append(f"field {column.name} changed from {column.type} to {wider}")
        else:
            out.append(column)
    for name, (field, optional) in new.items():
        if name not in columns.names:
            if not optional:
                problems.append(f"field {name} added without a default (required)")
            out.append(field)
    if problems:
        raise IncompatibleSchemaError(
            f"subject {subject} version {new_version} cannot follow version {old_version} "
            f"in the {who} sink's columns: {'; '.join(problems)} (the sink stops here; no "
            "offset past this record is committed)")
    return pa.schema(out)


# -- Avro -> Arrow -----------------------------------------------------------------------------

_AVRO_PRIMITIVES = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(), "null": pa.null(),
}
_AVRO_LOGICAL = {
    ("int", "date"): pa.date32(), ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}


def avro_fields(schema: Any, who: str = "a") -> list[tuple[pa.Field, bool]]:
    """The top-level record's fields as (Arrow field, optional?)."""
    names: dict[str, pa.DataType] = {}
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise RegistryError(f"the value schema is not an Avro record: the {who} sink needs "
                            "one column per field")
    out = []
    for field in schema["fields"]:
        arrow_type, nullable = _avro_type(field["type"], names, schema.get("namespace"))
        out.append((pa.field(field["name"], arrow_type), nullable or "default" in field))
    return out


def _avro_type(t: Any, names: dict, namespace: str | None) -> tuple[pa.DataType, bool]:
    """(Arrow type, whether null is allowed)."""
    if isinstance(t, list):
        branches = [b for b in t if b != "null" and b != {"type": "null"}]
        if len(branches) != 1:
            raise RegistryError(f"Avro union {json.dumps(t)} has no single Arrow type")
        return _avro_type(branches[0], names, namespace)[0], len(branches) < len(t)
    if isinstance(t, str):
        if t in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[t], t == "null"
        full = t if "." in t or not namespace else f"{namespace}.{t}"
        if full in names or t in names:
            return names.get(full, names.get(t)), False
        raise RegistryError(f"Avro type {t!r} is not defined")
    kind = t["type"]
    logical = t.get("logicalType")
    if logical == "decimal":
        return pa.decimal128(t["precision"], t.get("scale", 0)), False
    if isinstance(kind, str) and (kind, logical) in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[(kind, logical)], False
    if kind in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[kind], False
    ns = t.get("namespace", namespace)
    if kind == "record":
        arrow: pa.DataType = pa.struct([
            pa.field(f["name"], _avro_type(f["type"], names, ns)[0]) for f in t["fields"]])
    elif kind == "enum":
        arrow = pa.string()
    elif kind == "fixed":
        arrow = pa.binary(t["size"])
    elif kind == "array":
        return pa.list_(_avro_type(t["items"], names, ns)[0]), False
    elif kind == "map":
        return pa.map_(pa.string(), _avro_type(t["values"], names, ns)[0]), False
    else:
        return _avro_type(kind, names, ns)
    name = t["name"]
    names[name if "." in name or not ns else f"{ns}.{name}"] = names[name] = arrow
    return arrow, False


def _avro_reader(schema: Any):
    """payload -> dict with the writer's schema: fastavro when installed, else Avro's own."""
    try:
        import fastavro
    except ImportError:
        import avro.io
        import avro.schema

        parsed = avro.schema.parse(json.dumps(schema))
        reader = avro.io.DatumReader(parsed)
        return lambda payload: reader.read(avro.io.BinaryDecoder(io.BytesIO(payload)))
    parsed = fastavro.parse_schema(schema)
    return lambda payload: fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)


# -- JSON Schema -> Arrow ------------------------------------------------------------------------

_JSON_TYPES = {"integer": pa.int64(), "number": pa.float64(), "string": pa.string(),
               "boolean": pa.bool_()}


def json_schema_fields(schema: Any, who: str = "a") -> list[tuple[pa.Field, bool]]:
    if not isinstance(schema, dict) or "properties" not in schema:
        raise RegistryError("the value schema is not a JSON Schema object with properties: "
                            f"the {who} sink needs one column per property")
    required = set(schema.get("required", ()))
    return [(pa.field(name, _json_type(spec)), name not in required)
            for name, spec in schema["properties"].items()]


def _json_type(spec: Any) -> pa.DataType:
    kind = spec.get("type") if isinstance(spec, dict) else None
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    if kind == "array" and isinstance(spec.get("items"), dict):
        return pa.list_(_json_type(spec["items"]))
    if kind == "object" and "properties" in spec:
        return pa.struct([pa.field(n, _json_type(s)) for n, s in spec["properties"].items()])
    raise RegistryError(f"JSON Schema {json.dumps(spec)[:200]} has no single Arrow type")
