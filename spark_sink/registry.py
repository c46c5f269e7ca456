"""Typed values from a schema registry (docs/spark.md, "Typed values"): the Spark type of a
subject's Avro, JSON or Protobuf schema (the ``.proto``'s first message), and values in Confluent's wire format (magic byte 0, the
4-byte schema id, the body) decoded into an Arrow column of that type.

The driver asks the registry for the subject's latest version once (``schema()``); the
executors decode each value with the schema its own id names (fetched once per id and
process: ids never change), laying it on the subject's columns by name, so records written
with an earlier version read too (a field they lack is null).  A value that is not in the
wire format, names an id the registry does not have, or does not fit the columns becomes a
null ``value`` (its row keeps its place): nothing is dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from databus.schemas.client import RegistryClient, RegistryRefused
from databus.schemas.serde import Codec, header

VALUE_FORMATS = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
DEFAULT_REGISTRY = "http://127.0.0.1:8081"


class SchemaTypeError(ValueError):
    """A schema construct with no Spark column type."""


def latest(url: str, subject: str) -> dict:
    """The subject's latest version ({id, version, schema, schemaType?}); ValueError naming
    the registry's answer when it has none."""
    try:
        return RegistryClient(url).latest(subject)
    except RegistryRefused as exc:
        raise ValueError(f"schema registry {url}: subject {subject!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - unreachable: one line for the user
        raise ValueError(str(exc)) from None


def spark_type(schema_type: str, text: str) -> DataType:
    """The Spark type of an Avro, JSON or Protobuf schema (a record/object/message: a
    StructType)."""
    if schema_type == "PROTOBUF":
        return _protobuf(text)
    obj = json.loads(text)
    if schema_type == "AVRO":
        import fastavro

        names: dict[str, Any] = {}
        return _avro(fastavro.parse_schema(obj, named_schemas=names), names, ())
    if schema_type == "JSON":
        return _json(obj, obj, 0)
    raise SchemaTypeError(f"{schema_type} schemas have no Spark columns here yet "
                          "(Avro, JSON Schema and Protobuf do)")


def _protobuf(text: str) -> DataType:
    """The struct of the file's first message (what Confluent's serializers write by
    default; serde.py decodes that message): the Arrow types the sinks give it
    (protobuf_values.py), so unsigned 32-bit fields are bigint, enums strings, maps maps."""
    from pyspark.sql.pandas.types import from_arrow_type

    from databus.schemas.protobuf_values import ProtobufError, arrow_struct, first_message

    try:
        descriptor, _ = first_message(text, "the Spark source reads")
    except ProtobufError as exc:
        raise SchemaTypeError(str(exc)) from None
    return from_arrow_type(arrow_struct(descriptor))


def _avro(schema: Any, names: dict, seen: tuple) -> DataType:
    if isinstance(schema, str):
        if schema in names:
            if schema in seen:
                raise SchemaTypeError(f"the recursive type {schema} has no Spark column type")
            return _avro(names[schema], names, (*seen, schema))
        return _AVRO_PRIMITIVES[schema]() if schema in _AVRO_PRIMITIVES else _unknown(schema)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _avro(branches[0], names, seen)
        raise SchemaTypeError(f"the union {schema} has no Spark column type (only [null, T])")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "date" and kind == "int":
        return DateType()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return TimestampType()
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return TimestampNTZType()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind in ("record", "error"):
        name = schema.get("name")
        return StructType([StructField(f["name"], _avro(f["type"], names, (*seen, name)), True)
                           for f in schema["fields"]])
    if kind == "enum":
        return StringType()
    if kind == "array":
        return ArrayType(_avro(schema["items"], names, seen), True)
    if kind == "map":
        return MapType(StringType(), _avro(schema["values"], names, seen), True)
    if kind == "fixed":
        return BinaryType()
    return _avro(kind, names, seen)


_AVRO_PRIMITIVES = {"boolean": BooleanType, "int": IntegerType, "long": LongType,
                    "float": FloatType, "double": DoubleType, "bytes": BinaryType,
                    "string": StringType}


def _unknown(kind: Any) -> DataType:
    raise SchemaTypeError(f"the Avro type {kind!r} has no Spark column type")


def _json(schema: Any, root: Any, depth: int) -> DataType:
    if depth > 32 or not isinstance(schema, dict):
        return StringType()
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target: Any = root
        for part in ref[1:].strip("/").split("/"):
            if part:
                target = target.get(part) if isinstance(target, dict) else None
        return _json(target, root, depth + 1)
    kinds = schema.get("type")
    if isinstance(kinds, list):
        kinds = [k for k in kinds if k != "null"]
        kinds = kinds[0] if len(kinds) == 1 else None
    if kinds == "object" or (kinds is None and "properties" in schema):
        return StructType([StructField(name, _json(spec, root, depth + 1), True)
                           for name, spec in (schema.get("properties") or {}).items()])
    if kinds == "array":
        return ArrayType(_json(schema.get("items", {}), root, depth + 1), True)
    return {"integer": LongType(), "number": DoubleType(), "boolean": BooleanType()}.get(
        kinds, StringType())  # strings, and what has no one type: its JSON text


class ValueDecoder:
    """Wire-format values -> an Arrow column of the subject's type, on an executor."""

    def __init__(self, url: str, value_type: StructType) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type

        self.client = RegistryClient(url)
        self.value_type = value_type
        self.arrow_type = to_arrow_type(value_type, timezone="UTC")
        self._pa = pa
        self._codecs: dict[int, Codec | None] = {}

    def _codec(self, schema_id: int) -> Codec | None:
        if schema_id not in self._codecs:
            try:
                answer = self.client.schema(schema_id)
                self._codecs[schema_id] = Codec(schema_id, answer.get("schemaType") or "AVRO",
                                                answer["schema"])
            except (RegistryRefused, ValueError):
                self._codecs[schema_id] = None
        return self._codecs[schema_id]

    def decode(self, value: bytes | None) -> Any:
        if value is None or len(value) < 5 or value[0] != 0:
            return None
        codec = self._codec(header(value))
        if codec is None:
            return None
        try:
            decoded = codec.decode(value)
        except Exception:  # noqa: BLE001 - a body its schema does not read: a null value
            return None
        return decoded if isinstance(decoded, dict) else None

    def column(self, values) -> Any:
        """The decoded values as an Arrow array of the subject's struct type; a value that
        does not fit it is null (found one by one only when the whole column fails)."""
        pa = self._pa
        decoded = [self.decode(v) for v in values]
        try:
            return pa.array(decoded, type=self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            pass
        out = []
        for item in decoded:
            try:
                pa.array([item], type=self.arrow_type)
                out.append(item)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                out.append(None)
        return pa.array(out, type=self.arrow_type)
