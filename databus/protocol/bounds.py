"""Refuse a request whose length fields claim more than the frame holds, before kio sees it.

kio's native reader sizes an array from its claimed count before reading the elements, and a
failed allocation aborts the whole process (Rust's ``handle_alloc_error``): one Metadata v12
request whose topic count is a 5-byte varint near 2**32 kills the broker, kill -9 style.
Kafka's own readers check every count against the bytes remaining first
(``ByteBufferAccessor.readArray``: "Tried to read an array of N elements, but only M bytes
remain"); this module does the same walk in Python, per schema compiled once into a list of
steps, and raises ``LengthError`` for the first length that cannot fit.  Every string, bytes
and array element takes at least one byte, so a count above the bytes left is always a lie.

Only lengths are read: values are left to kio, which decodes what this walk has let through.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "timedelta_i32": 4, "int64": 8, "float64": 8, "datetime_i64": 8, "timedelta_i64": 8,
    "uuid": 16,
}
_SIZED = {"string", "bytes", "records"}


class LengthError(ValueError):
    """A length or count runs past the end of the frame."""


def _uvarint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise LengthError("a varint runs past the end of the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise LengthError("a varint is longer than 5 bytes")


def _i32(buf, pos: int) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise LengthError("a length runs past the end of the frame")
    return int.from_bytes(buf[pos:pos + 4], "big", signed=True), pos + 4


def _count(buf, pos: int, flexible: bool, what: str, small: bool = False) -> tuple[int, int]:
    """A length or element count (-1 = null) that must fit the bytes left."""
    if flexible:
        value, pos = _uvarint(buf, pos)
        value -= 1
    elif small:  # a legacy string's int16 length
        if pos + 2 > len(buf):
            raise LengthError("a length runs past the end of the frame")
        value, pos = int.from_bytes(buf[pos:pos + 2], "big", signed=True), pos + 2
    else:
        value, pos = _i32(buf, pos)
    if value > len(buf) - pos:
        raise LengthError(f"{what} of {value} claimed, only {len(buf) - pos} bytes remain")
    return value, pos


def _skip_value(kind: str, buf, pos: int, flexible: bool) -> int:
    size = _FIXED.get(kind)
    if size is not None:
        return pos + size
    n, pos = _count(buf, pos, flexible, f"a {kind} length", small=kind == "string")
    return pos + max(n, 0)


@cache
def _steps(schema: Any) -> tuple[list, dict]:
    """(untagged steps, tag -> step) for one kio entity class; consecutive fixed-size
    fields are one ("skip", total) step (most of a request: the walk stays cheap)."""
    flexible = bool(schema.__flexible__)
    steps: list = []
    tagged = {}
    for field in dataclasses.fields(schema):
        kind = field.metadata.get("kafka_type")
        shape = classify_field(field)
        step: tuple[str, Any]
        if isinstance(shape, EntityTupleField):
            step = ("entities", shape.type_)
        elif isinstance(shape, EntityField):
            # a nullable struct (KIP-893) starts with an int8 marker, -1 for null; tagged
            # fields are never written that way
            nullable = is_optional(field) and field.metadata.get("tag") is None
            step = ("nullable_entity" if nullable else "entity", shape.type_)
        elif isinstance(shape, PrimitiveTupleField):
            step = ("values", kind)
        elif kind in _FIXED:
            step = ("skip", _FIXED[kind])
        else:
            step = ("value", kind)
        tag = field.metadata.get("tag")
        if tag is not None and flexible:
            tagged[tag] = step
        elif step[0] == "skip" and steps and steps[-1][0] == "skip":
            steps[-1] = ("skip", steps[-1][1] + step[1])
        else:
            steps.append(step)
    return steps, tagged


def _walk(schema: Any, buf, pos: int) -> int:
    flexible = bool(schema.__flexible__)
    steps, tagged = _steps(schema)
    for step in steps:
        if step[0] == "skip":
            pos += step[1]
        else:
            pos = _step(step, buf, pos, flexible)
    if flexible:
        count, pos = _uvarint(buf, pos)
        if count:
            pos = _walk_tagged(tagged, buf, pos, count, flexible)
    return pos


def _walk_tagged(tagged: dict, buf, pos: int, count: int, flexible: bool) -> int:
    if count > len(buf) - pos:
        raise LengthError(f"{count} tagged fields claimed, only {len(buf) - pos} bytes remain")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        if size > len(buf) - pos:
            raise LengthError(f"tagged field {tag} of {size} bytes runs past the end")
        step = tagged.get(tag)
        if step is not None and step[0] != "skip":
            # the field's bytes alone: a count inside may not reach past them
            _step(step, buf[:pos + size], pos, flexible)
        pos += size
    return pos


def _step(step, buf, pos: int, flexible: bool) -> int:
    what, arg = step
    if what == "value":
        return _skip_value(arg, buf, pos, flexible)
    if what == "entity":
        return _walk(arg, buf, pos)
    if what == "nullable_entity":
        if pos >= len(buf):
            raise LengthError("a struct's null marker runs past the end of the frame")
        if buf[pos] >= 0x80:  # negative int8: null
            return pos + 1
        return _walk(arg, buf, pos + 1)
    n, pos = _count(buf, pos, flexible, "an array")
    if what == "values":
        size = _FIXED.get(arg)
        if size is not None:
            return pos + max(n, 0) * size
        for _ in range(n):
            pos = _skip_value(arg, buf, pos, flexible)
        return pos
    for _ in range(n):
        pos = _walk(arg, buf, pos)
    return pos


def check_lengths(schema: Any, buf, pos: int) -> None:
    """Raise LengthError if a length in the ``schema`` body at ``buf[pos:]`` cannot fit."""
    _walk(schema, buf, pos)
