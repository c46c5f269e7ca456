"""Protobuf values for typed streams, without I/O (serde.py's ``Codec`` for a PROTOBUF
subject): a dict (what an app sends as msgpack or JSON) checked against the subject's first
message and written in Confluent's Protobuf wire format, and read back.

    payload = ProtobufCodec(text).encode({"order_id": 1, "item": "pen"})
    # b"\\0" (message indexes: the first message) + the message's bytes

The caller puts the magic byte and schema id in front; what follows is what confluent-kafka's
``ProtobufSerializer`` writes: the message indexes (a single 0 byte for ``[0]``, the file's
first message) then the serialized message, so ``ProtobufDeserializer`` reads it.

The dict is walked against the message descriptor (protobuf_values.first_message) and a value
it does not take is refused with a ``RecordError`` naming the field (``$.lines[1].qty``) and
the rule: ``unknown field`` (it would be dropped), ``type``, ``range`` (a number that does
not fit the field's integer type), ``enum`` (a name or number the enum lacks; proto3 enums
are open to numbers), ``oneof`` (two members of one oneof set), ``required`` (a proto2
required field missing), ``bytes`` (a string that is not base64).  Names are the .proto
field names (the JSON mapping's lowerCamelCase names are taken too); ``None`` leaves a
field unset.  As in Protobuf's JSON mapping, 64-bit integers may come as decimal strings
and bytes as base64 text (JSON has no bytes).

Decoding gives a dict in the same shape: every field, an unset field with presence (a
message, proto3 ``optional``, a oneof member, proto2) as None, a proto3 scalar without
presence as its default, enums by name, maps as dicts.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

from .protobuf_values import first_message, message_indexes
from .serde import RecordError

_FIRST_MESSAGE = b"\x00"  # the message indexes [0], as Confluent writes them
_FLOAT_MAX = 3.4028234663852886e38

# FieldDescriptor.TYPE_* -> (low, high) for the integer types
_RANGES = {5: (-(2**31), 2**31 - 1), 17: (-(2**31), 2**31 - 1), 15: (-(2**31), 2**31 - 1),
           13: (0, 2**32 - 1), 7: (0, 2**32 - 1),
           3: (-(2**63), 2**63 - 1), 18: (-(2**63), 2**63 - 1), 16: (-(2**63), 2**63 - 1),
           4: (0, 2**64 - 1), 6: (0, 2**64 - 1)}
_WIDE = {3, 18, 16, 4, 6}  # 64-bit: the JSON mapping writes them as strings
_TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
               7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 14: "enum",
               15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64", 11: "message"}


class ProtobufCodec:
    """The first message of a subject's ``.proto`` text (or base64 descriptor):
    ``encode(dict) -> payload`` (message indexes + message) and ``decode(payload)``."""

    def __init__(self, text: str) -> None:
        self.descriptor, self.message = first_message(text, "typed streams take")

    def encode(self, value: Any) -> bytes:
        message = self.message()
        _fill(message, value, "$")
        return _FIRST_MESSAGE + message.SerializeToString()

    def decode(self, payload: bytes) -> dict:
        indexes, at = message_indexes(payload)
        if indexes != [0]:
            raise ValueError(f"message indexes {indexes} name another message than "
                             f"{self.descriptor.full_name}, the subject's first")
        message = self.message()
        try:
            message.ParseFromString(payload[at:])
        except Exception as exc:  # protobuf's DecodeError is not a ValueError
            raise ValueError(f"not a {self.descriptor.full_name} message: {exc}") from None
        return _to_dict(message)


def _got(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _fill(message, value: Any, path: str) -> None:
    descriptor = message.DESCRIPTOR
    if not isinstance(value, dict):
        raise RecordError(path, "type", f"expected message {descriptor.full_name}, got "
                          f"{_got(value)}")
    oneofs: dict[str, str] = {}
    for key, item in value.items():
        field = (descriptor.fields_by_name.get(key) if isinstance(key, str) else None) \
            or (descriptor.fields_by_camelcase_name.get(key) if isinstance(key, str) else None)
        where = f"{path}.{key}"
        if field is None:
            raise RecordError(where, "unknown field", f"not a field of message "
                              f"{descriptor.full_name} (it would be dropped)")
        if item is None:
            continue
        oneof = field.containing_oneof
        if oneof is not None and not (len(oneof.fields) == 1 and field.has_presence
                                      and oneof.name.startswith("_")):
            if oneof.name in oneofs:
                raise RecordError(where, "oneof", f"{oneofs[oneof.name]!r} of oneof "
                                  f"{oneof.name!r} is set already (one member at most)")
            oneofs[oneof.name] = field.name
        _set(message, field, item, where)
    for field in descriptor.fields:
        if field.is_required and not message.HasField(field.name):
            raise RecordError(f"{path}.{field.name}", "required",
                              f"required field of message {descriptor.full_name} missing")


def _set(message, field, value: Any, path: str) -> None:
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        if not isinstance(value, dict):
            raise RecordError(path, "type", f"expected map, got {_got(value)}")
        key_field, value_field = entry.fields
        target = getattr(message, field.name)
        for key, item in value.items():
            where = f"{path}.{key}"
            key = _scalar(key_field, key, where, map_key=True)
            if value_field.message_type is not None:
                _fill(target[key], item, where)
            else:
                target[key] = _scalar(value_field, item, where)
        return
    if field.is_repeated:
        if not isinstance(value, (list, tuple)):
            raise RecordError(path, "type", f"expected a list (repeated "
                              f"{_kind(field)}), got {_got(value)}")
        target = getattr(message, field.name)
        for i, item in enumerate(value):
            where = f"{path}[{i}]"
            if item is None:
                raise RecordError(where, "type", f"a repeated {_kind(field)} has no nulls")
            if field.message_type is not None:
                _fill(target.add(), item, where)
            else:
                target.append(_scalar(field, item, where))
        return
    if field.message_type is not None:
        inner = getattr(message, field.name)
        inner.SetInParent()  # (an empty dict still sets the field)
        _fill(inner, value, path)
        return
    setattr(message, field.name, _scalar(field, value, path))


def _kind(field) -> str:
    if field.message_type is not None:
        return field.message_type.full_name
    if field.enum_type is not None:
        return field.enum_type.full_name
    return _TYPE_NAMES.get(field.type, str(field.type))


def _scalar(field, value: Any, path: str, map_key: bool = False) -> Any:
    kind = field.type
    if field.enum_type is not None:
        enum = field.enum_type
        if isinstance(value, str):
            known = enum.values_by_name.get(value)
            if known is None:
                raise RecordError(path, "enum", f"{value!r} is not one of "
                                  f"{[v.name for v in enum.values]}")
            return known.number
        if type(value) is int:
            if value in enum.values_by_number or not enum.is_closed:
                if not -(2**31) <= value <= 2**31 - 1:
                    raise RecordError(path, "range", f"{value} does not fit an enum (int32)")
                return value
            raise RecordError(path, "enum", f"{value} is not a number of {enum.full_name}")
        raise RecordError(path, "type", f"expected {enum.full_name} (a name or number), "
                          f"got {_got(value)}")
    if kind in _RANGES:
        if isinstance(value, str) and (kind in _WIDE or map_key):
            try:  # (the JSON mapping's 64-bit integers, and JSON's map keys)
                value = int(value)
            except ValueError:
                raise RecordError(path, "type", f"expected {_kind(field)}, got "
                                  f"{_got(value)}") from None
        if type(value) is not int:
            raise RecordError(path, "type", f"expected {_kind(field)}, got {_got(value)}")
        low, high = _RANGES[kind]
        if not low <= value <= high:
            raise RecordError(path, "range", f"{value} does not fit Protobuf's "
                              f"{_kind(field)}")
        return value
    if kind in (1, 2):  # double, float
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(path, "type", f"expected {_kind(field)}, got {_got(value)}")
        if kind == 2 and abs(value) > _FLOAT_MAX and not math.isinf(value):
            raise RecordError(path, "range", f"{value} does not fit Protobuf's float")
        return float(value)
    if kind == 8:  # bool
        if map_key and value in ("true", "false"):
            return value == "true"
        if type(value) is not bool:
            raise RecordError(path, "type", f"expected bool, got {_got(value)}")
        return value
    if kind == 9:  # string
        if not isinstance(value, str):
            raise RecordError(path, "type", f"expected string, got {_got(value)}")
        return value
    if kind == 12:  # bytes
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str):
            try:  # (JSON has no bytes: the JSON mapping's base64, either alphabet)
                return base64.b64decode(value.replace("-", "+").replace("_", "/")
                                        + "=" * (-len(value) % 4), validate=True)
            except (binascii.Error, ValueError):
                raise RecordError(path, "bytes", "a string for a bytes field is base64 "
                                  "text, and this is not") from None
        raise RecordError(path, "type", f"expected bytes, got {_got(value)}")
    raise RecordError(path, "type", f"Protobuf type {kind} is not supported")


def _to_dict(message) -> dict:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            inner = entry.fields[1]
            out[field.name] = {k: _value(inner, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field, value: Any) -> Any:
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.message_type is not None:
        return _to_dict(value)
    return value
