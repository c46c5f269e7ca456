"""Protobuf values for the sinks' registry columns (columns.py): a subject's ``.proto`` text
turned into Arrow fields and a reader of Confluent's Protobuf payloads.

The payload after the magic byte and schema id starts with the message indexes (Confluent's
wire format: a zigzag varint count, then that many zigzag varint indexes, the path of the
message in the file; a single 0 byte stands for ``[0]``, the first message), then the
message.  The columns are the file's first message's fields (what Confluent's serializers
write by default); a record of another message is not a row of those columns and is
refused (dead-lettered) with the reason.

The ``.proto`` text is parsed by proto-schema-parser (the registry's own parser,
formats/protobuf_format.py) into a ``FileDescriptorProto`` (a subject registered as a base64
descriptor, as confluent-kafka's Python serializer does, is that already), and the messages
are read by the protobuf runtime (``first_message``; typed streams build theirs here too).  Imports (``google/protobuf/timestamp.proto``, ...) are not
supported: a field of an imported type makes the subject unreadable, with that reason.

Rows: every field of the message; a field with presence (a message, proto3 ``optional``, a
oneof member, any proto2 field) that is unset is null; a proto3 scalar without presence
reads as its default, as protobuf readers do; enums read as their value's name; repeated
fields as lists; maps as Arrow maps.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

_SCALARS = {
    "double": pa.float64(), "float": pa.float32(), "int32": pa.int32(), "sint32": pa.int32(),
    "sfixed32": pa.int32(), "int64": pa.int64(), "sint64": pa.int64(),
    "sfixed64": pa.int64(), "uint32": pa.int64(), "fixed32": pa.int64(),
    # (an unsigned 64-bit value past 2**63 does not fit a long column: that record is
    # dead-lettered with the reason)
    "uint64": pa.int64(), "fixed64": pa.int64(), "bool": pa.bool_(), "string": pa.string(),
    "bytes": pa.binary(),
}


class ProtobufError(ValueError):
    """The subject's .proto text cannot give columns (the reason says why)."""


def message_indexes(payload: bytes) -> tuple[list[int], int]:
    """(the message indexes, where the message starts) of a payload after the schema id."""
    count, at = _zigzag(payload, 0)
    if count == 0:
        return [0], at
    indexes = []
    for _ in range(count):
        index, at = _zigzag(payload, at)
        indexes.append(index)
    return indexes, at


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if at >= len(data):
            raise ValueError("the message indexes end early")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
        if shift > 63:
            raise ValueError("a message index is not a varint")


class ProtobufValues:
    """The first message of a ``.proto`` text: ``fields`` [(Arrow field, optional?)] and
    ``read(payload)`` -> a row (dict)."""

    def __init__(self, text: str, who: str) -> None:
        self.descriptor, self.message = first_message(text, f"the {who} sink reads")
        # proto3: every field may be absent (reads as its default): all optional.
        self.fields = [(pa.field(f.name, _arrow(f)), True) for f in self.descriptor.fields]

    def read(self, payload: bytes) -> dict:
        indexes, at = message_indexes(payload)
        if indexes != [0]:
            raise ValueError(f"message indexes {indexes} name another message than "
                             f"{self.descriptor.full_name}, the subject's first")
        message = self.message()
        message.ParseFromString(payload[at:])
        return _row(message)


def first_message(text: str, who: str = "databus reads"):
    """(descriptor, message class) of the first message of a subject's schema: ``.proto``
    text, or the base64 ``FileDescriptorProto`` confluent-kafka's Python serializer
    registers.  ProtobufError says why not (``who`` opens the sentence on imports)."""
    from google.protobuf import descriptor_pool, message_factory

    from .formats.protobuf_format import _descriptor

    file = _descriptor(text)
    if file is None:
        file = _file_of_text(text, who)
    elif file.dependency:
        raise ProtobufError(f"the schema imports {list(file.dependency)}: {who} "
                            "self-contained Protobuf schemas only")
    if not file.message_type:
        raise ProtobufError("the .proto has no message")
    pool = descriptor_pool.DescriptorPool()
    try:
        pool.Add(file)
        name = (file.package + "." if file.package else "") + file.message_type[0].name
        descriptor = pool.FindMessageTypeByName(name)
    except Exception as exc:  # TypeError/KeyError from the pool: an unknown type, ...
        raise ProtobufError(f"the .proto cannot be built: {exc}") from None
    return descriptor, message_factory.GetMessageClass(descriptor)


def _file_of_text(text: str, who: str):
    from google.protobuf import descriptor_pb2
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser

    from .formats.protobuf_format import _strict

    try:  # (strict: ANTLR would print a syntax error and recover, building a wrong file)
        parsed = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except Exception as exc:  # the parser raises several kinds on bad text
        raise ProtobufError(f"the .proto text does not parse: {exc}") from None
    if any(isinstance(e, ast.Import) for e in parsed.file_elements):
        raise ProtobufError(f"the .proto imports other files: {who} self-contained .proto "
                            "schemas only")
    file = descriptor_pb2.FileDescriptorProto(name="subject.proto",
                                               syntax=parsed.syntax or "proto2")
    for element in parsed.file_elements:
        if isinstance(element, ast.Package):
            file.package = element.name
        elif isinstance(element, ast.Message):
            _message(element, file.message_type.add(), ast, file.syntax == "proto3")
        elif isinstance(element, ast.Enum):
            _enum(element, file.enum_type.add(), ast)
    return file


def arrow_struct(descriptor) -> pa.StructType:
    """The Arrow struct of a message descriptor's fields (the Spark source's columns)."""
    return pa.struct([pa.field(f.name, _arrow(f)) for f in descriptor.fields])


def _message(node, out, ast, proto3: bool) -> None:
    from google.protobuf import descriptor_pb2

    out.name = node.name
    explicit = []  # proto3 `optional` fields: presence by a synthetic oneof each (after the
    for element in node.elements:  # real oneofs, as protoc lays them out)
        if isinstance(element, ast.Field):
            field = _field(element, out.field.add(), ast)
            if proto3 and getattr(element.cardinality, "value", None) == "OPTIONAL":
                field.proto3_optional = True
                explicit.append(field)
        elif isinstance(element, ast.OneOf):
            index = len(out.oneof_decl)
            out.oneof_decl.add(name=element.name)
            for inner in element.elements:
                if isinstance(inner, ast.Field):
                    _field(inner, out.field.add(), ast).oneof_index = index
        elif isinstance(element, ast.MapField):
            entry = out.nested_type.add(name=_entry_name(element.name))
            entry.options.map_entry = True
            _typed(entry.field.add(name="key", number=1), element.key_type)
            _typed(entry.field.add(name="value", number=2), element.value_type)
            out.field.add(name=element.name, number=element.number,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                          type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                          type_name=entry.name)
        elif isinstance(element, ast.Message):
            _message(element, out.nested_type.add(), ast, proto3)
        elif isinstance(element, ast.Enum):
            _enum(element, out.enum_type.add(), ast)
    for field in explicit:
        field.oneof_index = len(out.oneof_decl)
        out.oneof_decl.add(name="_" + field.name)


def _field(node, out, ast):
    from google.protobuf import descriptor_pb2

    labels = descriptor_pb2.FieldDescriptorProto
    out.name, out.number = node.name, node.number
    cardinality = getattr(node.cardinality, "value", None)
    out.label = {"REPEATED": labels.LABEL_REPEATED,
                 "REQUIRED": labels.LABEL_REQUIRED}.get(cardinality, labels.LABEL_OPTIONAL)
    _typed(out, str(node.type))
    return out


def _typed(out, type_name: str) -> None:
    from google.protobuf import descriptor_pb2

    scalar = getattr(descriptor_pb2.FieldDescriptorProto, f"TYPE_{type_name.upper()}", None)
    if type_name in _SCALARS and scalar is not None:
        out.type = scalar
    else:  # a message or enum: the pool resolves the name from the field's scope
        out.type_name = type_name


def _entry_name(field: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def _enum(node, out, ast) -> None:
    out.name = node.name
    for element in node.elements:
        if isinstance(element, ast.EnumValue):
            out.value.add(name=element.name, number=element.number)


def _arrow(field) -> pa.DataType:
    """The Arrow type of a field descriptor."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields
        return pa.map_(_element(key), _element(value))
    element = _element(field)
    return pa.list_(element) if field.is_repeated else element


def _element(field) -> pa.DataType:
    if field.enum_type is not None:
        return pa.string()
    if field.message_type is not None:
        return pa.struct([pa.field(f.name, _arrow(f)) for f in field.message_type.fields])
    return _SCALARS[_TYPE_NAMES[field.type]]


def _type_names() -> dict[int, str]:
    from google.protobuf import descriptor_pb2

    return {getattr(descriptor_pb2.FieldDescriptorProto, f"TYPE_{n.upper()}"): n
            for n in _SCALARS}


_TYPE_NAMES = _type_names()


def _row(message) -> dict:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = [(k, _value(field.message_type.fields[1], v))
                               for k, v in value.items()]
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field, value):
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.message_type is not None:
        return _row(value)
    return value
