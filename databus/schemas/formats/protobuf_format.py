"""Protobuf schemas as ``.proto`` text, parsed by ``proto-schema-parser`` (a pure-Python
ANTLR parser of the proto2/proto3 grammar) and compared by the rules Confluent documents for
Protobuf: data is matched by field number, so adding or removing a field, renaming one, or
widening a scalar within its wire-compatible group (int32/uint32/int64/uint64/bool,
sint32/sint64, string/bytes, fixed32/sfixed32, fixed64/sfixed64) is compatible; changing the
package, removing a message, changing a field's kind or named type, adding or removing a
``required`` field, removing a field from a oneof or moving fields into one is not.

Two forms are taken: ``.proto`` text (what Java's KafkaProtobufSerializer registers) and a
base64 ``FileDescriptorProto`` (what confluent-kafka's Python ProtobufSerializer registers),
read with protobuf's own ``descriptor_pb2`` into the same model, so both are compared by the
same rules.  A descriptor is stored as its deterministic serialization in base64 and served
as stored, which is what the Python deserializer asks for (``?format=serialized``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from antlr4.error.ErrorListener import ErrorListener
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from databus.schemas.errors import invalid_schema

from . import ParsedSchema, Reference

SCALARS = {"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
           "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"}
WIRE_GROUPS = [{"int32", "uint32", "int64", "uint64", "bool"}, {"sint32", "sint64"},
               {"string", "bytes"}, {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"}]


@dataclass(frozen=True)
class _Field:
    name: str
    type: str
    required: bool
    oneof: str | None


@dataclass(frozen=True)
class _Proto:
    package: str
    messages: dict[str, dict[int, _Field]]  # full message name -> number -> field


class _Strict(ErrorListener):
    """A syntax error raises (ANTLR would print it and recover, accepting bad text)."""

    def syntaxError(self, recognizer, offendingSymbol, line, column, msg, e):  # noqa: N802, N803
        raise ValueError(f"line {line}:{column} {msg}")


def _strict(recognizer) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Strict())


def parse(text: str, references: tuple[Reference, ...] = ()) -> ParsedSchema:
    descriptor = _descriptor(text)
    if descriptor is not None:
        return _from_descriptor(descriptor, references)
    try:
        file = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except Exception as exc:  # the parser raises ValueError and others on bad input
        raise invalid_schema(f"{text[:200]!r}, details: {exc}") from None
    package = next((e.name for e in file.file_elements if isinstance(e, ast.Package)), "")
    messages: dict[str, dict[int, _Field]] = {}
    for element in file.file_elements:
        if isinstance(element, ast.Message):
            _collect(element, package, messages)
    if not messages and not any(isinstance(e, ast.Enum) for e in file.file_elements):
        raise invalid_schema(f"{text[:200]!r}, details: no message or enum")
    canonical = "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return ParsedSchema("PROTOBUF", canonical, canonical, _Proto(package, messages),
                        tuple(references))


def _collect(message, prefix: str, out: dict) -> None:
    name = f"{prefix}.{message.name}" if prefix else message.name
    fields: dict[int, _Field] = {}
    for element in message.elements:
        if isinstance(element, ast.Field):
            fields[element.number] = _field(element, None)
        elif isinstance(element, ast.MapField):
            fields[element.number] = _Field(element.name, f"map<{element.key_type},"
                                            f"{element.value_type}>", False, None)
        elif isinstance(element, ast.OneOf):
            for inner in element.elements:
                if isinstance(inner, ast.Field):
                    fields[inner.number] = _field(inner, element.name)
        elif isinstance(element, ast.Message):
            _collect(element, name, out)
    out[name] = fields


def _field(element, oneof: str | None) -> _Field:
    cardinality = getattr(element, "cardinality", None)
    label = getattr(cardinality, "value", str(cardinality or "")).upper()
    kind = str(element.type)
    if label == "REPEATED":
        kind = f"repeated {kind}"
    return _Field(element.name, kind, label == "REQUIRED", oneof)


def _fail(problems: list[str], error_type: str, where: str, text: str) -> None:
    problems.append(f"{{errorType:'{error_type}', description:'{text} at {where}'}}")


def incompatibilities(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    old: _Proto = writer.parsed  # type: ignore[assignment]
    new: _Proto = reader.parsed  # type: ignore[assignment]
    problems: list[str] = []
    if old.package != new.package:
        _fail(problems, "PACKAGE_CHANGED", "#/", f"The package changed from '{old.package}' "
              f"to '{new.package}'")
    for name, old_fields in old.messages.items():
        new_fields = new.messages.get(name)
        if new_fields is None:
            _fail(problems, "MESSAGE_REMOVED", f"#/{name}", "The message was removed")
            continue
        moved_to_new_oneof = 0
        for number, before in old_fields.items():
            after = new_fields.get(number)
            where = f"#/{name}/{number}"
            if after is None:
                if before.required:
                    _fail(problems, "REQUIRED_FIELD_REMOVED", where, "A required field was "
                          "removed")
                elif before.oneof is not None:
                    _fail(problems, "ONEOF_FIELD_REMOVED", where, "A field of a oneof was "
                          "removed")
                continue
            if before.type != after.type and not _wire_compatible(before.type, after.type):
                kind = ("FIELD_SCALAR_KIND_CHANGED" if before.type in SCALARS
                        and after.type in SCALARS else
                        "FIELD_NAMED_TYPE_CHANGED" if before.type not in SCALARS
                        and after.type not in SCALARS else "FIELD_KIND_CHANGED")
                _fail(problems, kind, where, f"The type changed from {before.type} to "
                      f"{after.type}")
            if before.oneof is None and after.oneof is not None:
                old_oneofs = {f.oneof for f in old_fields.values() if f.oneof}
                if after.oneof in old_oneofs:
                    _fail(problems, "FIELD_MOVED_TO_EXISTING_ONEOF", where, "A field moved "
                          "into an existing oneof")
                else:
                    moved_to_new_oneof += 1
        if moved_to_new_oneof > 1:
            _fail(problems, "MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"#/{name}", "Several fields "
                  "moved into a new oneof")
        for number, after in new_fields.items():
            if number not in old_fields and after.required:
                _fail(problems, "REQUIRED_FIELD_ADDED", f"#/{name}/{number}", "A required "
                      "field was added")
    return problems


def _wire_compatible(a: str, b: str) -> bool:
    return any(a in group and b in group for group in WIRE_GROUPS)


# -- the serialized form: a base64 FileDescriptorProto -------------------------------------

_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def _descriptor(text: str):
    """The FileDescriptorProto ``text`` encodes in base64, None if it is not that (then it
    is read as .proto text)."""
    raw = text.strip().encode("ascii", "replace")
    if not raw or len(raw) % 4 or not set(raw) <= _BASE64:
        return None
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(raw))
    except (DecodeError, ValueError):
        return None
    if not (descriptor.message_type or descriptor.enum_type):
        return None  # (base64 of something else that happens to decode)
    return descriptor


def _from_descriptor(descriptor, references: tuple[Reference, ...]) -> ParsedSchema:
    package = descriptor.package
    messages: dict[str, dict[int, _Field]] = {}
    for message in descriptor.message_type:
        _collect_descriptor(message, package, package, messages)
    canonical = base64.b64encode(descriptor.SerializeToString(deterministic=True)).decode()
    return ParsedSchema("PROTOBUF", canonical, canonical, _Proto(package, messages),
                        tuple(references))


# FieldDescriptorProto.Type numbers -> the .proto scalar names
_SCALAR_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
                 7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32",
                 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
_LABEL_REPEATED, _LABEL_REQUIRED = 3, 2


def _type_name(name: str, package: str) -> str:
    """A named type as .proto text would likely write it: relative to the package."""
    name = name.lstrip(".")
    return name[len(package) + 1:] if package and name.startswith(package + ".") else name


def _collect_descriptor(message, prefix: str, package: str, out: dict) -> None:
    name = f"{prefix}.{message.name}" if prefix else message.name
    entries = {nested.name: nested for nested in message.nested_type
               if nested.options.map_entry}
    fields: dict[int, _Field] = {}
    for field in message.field:
        oneof = None
        if field.HasField("oneof_index") and not field.proto3_optional:
            oneof = message.oneof_decl[field.oneof_index].name
        entry = entries.get(field.type_name.rsplit(".", 1)[-1]) if field.type_name else None
        if entry is not None and field.label == _LABEL_REPEATED:
            key, value = entry.field[0], entry.field[1]
            kind = (f"map<{_SCALAR_NAMES.get(key.type, key.type_name)},"
                    f"{_SCALAR_NAMES.get(value.type) or _type_name(value.type_name, package)}>")
            fields[field.number] = _Field(field.name, kind, False, None)
            continue
        kind = _SCALAR_NAMES.get(field.type) or _type_name(field.type_name, package)
        if field.label == _LABEL_REPEATED:
            kind = f"repeated {kind}"
        fields[field.number] = _Field(field.name, kind, field.label == _LABEL_REQUIRED, oneof)
    for nested in message.nested_type:
        if not nested.options.map_entry:
            _collect_descriptor(nested, name, package, out)
    out[name] = fields
