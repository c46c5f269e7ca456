"""The schema formats: parsing (is it a valid schema?), its canonical text (what the
registry stores and compares), normalisation and the compatibility of two schemas.

    parsed = parse("AVRO", text, references)   # raises RegistryError 42201 if invalid
    problems = incompatibilities(reader, writer)  # [] when reader can read writer's data

``references`` are the already-parsed schemas this one names (Confluent's schema
references: ``{"name", "subject", "version"}``, resolved by the registry), in dependency
order.  Each format lives in its own module (Avro, JSON Schema, Protobuf .proto text); this one
dispatches on ``schemaType``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from databus.schemas.errors import RegistryError, unprocessable

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True)
class Reference:
    """A resolved schema reference: the name it is imported under and its parsed schema."""

    name: str
    schema: ParsedSchema


@dataclass(frozen=True)
class ParsedSchema:
    schema_type: str
    canonical: str          # what is stored and returned: compact, whitespace-free
    normalized: str         # ?normalize=true: the canonical text with order normalised too
    parsed: object = field(compare=False, repr=False)
    references: tuple[Reference, ...] = field(default=(), compare=False, repr=False)


def check_type(schema_type: str | None) -> str:
    schema_type = (schema_type or "AVRO").upper()
    if schema_type not in SCHEMA_TYPES:
        raise unprocessable(f"Invalid schema type {schema_type}")
    return schema_type


def parse(schema_type: str, text: str, references: tuple[Reference, ...] = ()) -> ParsedSchema:
    if schema_type == "AVRO":
        from . import avro_format as module
    elif schema_type == "JSON":
        from . import json_format as module  # type: ignore[no-redef]
    elif schema_type == "PROTOBUF":
        from . import protobuf_format as module  # type: ignore[no-redef]
    else:
        raise unprocessable(f"Invalid schema type {schema_type}")
    return module.parse(text, references)


def incompatibilities(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` ([] when it can), in
    Confluent's words (``{errorType:'...', description:'...'}``)."""
    if reader.schema_type != writer.schema_type:
        return [f"{{errorType:'TYPE_MISMATCH', description:'The schema type changed from "
                f"{writer.schema_type} to {reader.schema_type}'}}"]
    if reader.schema_type == "AVRO":
        from . import avro_format as module
    elif reader.schema_type == "JSON":
        from . import json_format as module  # type: ignore[no-redef]
    else:
        from . import protobuf_format as module  # type: ignore[no-redef]
    return module.incompatibilities(reader, writer)


__all__ = ["SCHEMA_TYPES", "ParsedSchema", "Reference", "RegistryError", "check_type",
           "incompatibilities", "parse"]
