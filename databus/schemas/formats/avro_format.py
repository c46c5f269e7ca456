"""Avro schemas, parsed and compared by Apache Avro's own Python library (the reference
implementation: its parser and its ReaderWriterCompatibilityChecker are the rules of Avro's
schema resolution, the same rules Confluent's registry applies through Avro's Java library).

The canonical text is the parsed schema written back as compact JSON: whitespace, the
``{"type": "string"}`` spelling of a primitive and short names inside a namespace do not
make a different schema.  A schema with references keeps its own text (compacted), since
writing it back would inline the referenced types.
"""

from __future__ import annotations

import json

import avro.compatibility
import avro.errors
import avro.name
import avro.schema

from databus.schemas.errors import invalid_schema

from . import ParsedSchema, Reference


def _compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def parse(text: str, references: tuple[Reference, ...] = ()) -> ParsedSchema:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise invalid_schema(f"{text[:200]!r}: not JSON ({exc})") from None
    names = avro.name.Names()
    try:
        for ref in references:
            avro.schema.make_avsc_object(json.loads(ref.schema.canonical), names)
        schema = avro.schema.make_avsc_object(obj, names)
    except (avro.errors.AvroException, TypeError, ValueError, KeyError,
            AttributeError) as exc:
        raise invalid_schema(f"{text[:200]!r}, details: {exc}") from None
    except RecursionError:
        raise invalid_schema(f"{text[:200]!r}, details: nested too deeply") from None
    if references:
        canonical = _compact(obj)
    else:
        canonical = _compact(_fields_name_first(schema.to_json()))
    return ParsedSchema("AVRO", canonical, canonical, schema, tuple(references))


def _fields_name_first(obj):
    """Each field as ``{"name", "type", ...}``, the order Avro's Java library writes (and so
    Confluent's registry returns), rather than the Python library's type-first order."""
    if isinstance(obj, list):
        return [_fields_name_first(item) for item in obj]
    if not isinstance(obj, dict):
        return obj
    out = {key: _fields_name_first(value) for key, value in obj.items()}
    if isinstance(out.get("fields"), list):
        out["fields"] = [{"name": f["name"], **{k: v for k, v in f.items() if k != "name"}}
                         if isinstance(f, dict) and "name" in f else f for f in out["fields"]]
    return out


def incompatibilities(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    checker = avro.compatibility.ReaderWriterCompatibilityChecker()
    try:
        result = checker.get_compatibility(reader.parsed, writer.parsed)
    except (avro.errors.AvroException, RecursionError) as exc:
        return [f"{{errorType:'UNKNOWN', description:'{exc}'}}"]
    if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
        return []
    problems = []
    for kind, message, location in zip(result.incompatibilities, result.messages,
                                        result.locations):
        error_type = getattr(kind, "value", str(kind)).upper()
        problems.append(f"{{errorType:'{error_type}', description:'The field at path "
                        f"'{location}' in the new schema cannot read the old one: "
                        f"{message}', additionalInfo:'{message}'}}")
    if not problems:
        problems.append("{errorType:'INCOMPATIBLE', description:'the new schema cannot "
                        "read data written with the old one'}")
    return problems
