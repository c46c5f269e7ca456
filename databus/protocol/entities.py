"""Build kio entities (requests, responses, nested structs) for whichever version is in use.

kio has one frozen dataclass per (api key, version) and the field sets differ between
versions.  A caller states what it has once, with kio's field names, and ``build(cls, fields)``
(or ``build(cls, **fields)``) keeps only the fields that version has, converts milliseconds
to the ``timedelta`` kio expects, builds nested entities from dicts, turns lists into tuples,
and fills required fields the caller did not mention with their zero value (e.g. a topic id
the version wants but the caller addresses by name).  This keeps version handling out of
every call site: the client's requests, the broker's responses, the UNSUPPORTED_VERSION
answers (``error_entity``) and the benches all build through here.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any, NamedTuple

from .errors import ErrorCode
from .framing import request_schema

_ZERO_BY_TYPE: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "float64": 0.0,
    "bool": False, "string": "", "bytes": b"", "records": None,
    "uuid": uuid.UUID(int=0), "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}


class _Field(NamedTuple):
    name: str
    kafka_type: str
    nested: type | None  # the entity class of a struct field (or of an array's items)
    required: bool
    is_tuple: bool
    nullable: bool


@cache
def _plan(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nullable = False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = typing.get_args(hint)
            nullable = type(None) in args
            non_none = [a for a in args if a is not type(None)]
            hint = non_none[0] if len(non_none) == 1 else hint
        args = typing.get_args(hint)
        is_tuple = typing.get_origin(hint) is tuple
        nested: type | None = None
        if is_tuple and args and dataclasses.is_dataclass(args[0]):
            nested = typing.cast(type, args[0])
        elif dataclasses.is_dataclass(hint):
            nested = typing.cast(type, hint)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plan.append(
            _Field(f.name, f.metadata.get("kafka_type", ""), nested, required, is_tuple, nullable)
        )
    return tuple(plan)


def _zero(cls: type, f: _Field, error_code: int) -> Any:
    if f.is_tuple:
        return ()
    if f.kafka_type == "error_code":
        return ErrorCode(error_code)
    if f.nested is not None:
        return _build(f.nested, {}, error_code)
    if f.kafka_type in _ZERO_BY_TYPE:
        zero = _ZERO_BY_TYPE[f.kafka_type]
        return b"" if zero is None and not f.nullable else zero
    if f.nullable:
        return None
    raise TypeError(f"no zero value for {cls.__name__}.{f.name} ({f.kafka_type or 'untyped'})")


def _build(cls: type, fields: Mapping[str, Any], error_code: int) -> Any:
    kwargs: dict[str, Any] = {}
    for f in _plan(cls):
        if f.name in fields:
            value = fields[f.name]
            if value is None:
                pass
            elif f.nested is not None:
                if f.is_tuple:
                    value = tuple(
                        _build(f.nested, v, error_code) if isinstance(v, Mapping) else v
                        for v in value
                    )
                elif isinstance(value, Mapping):
                    value = _build(f.nested, value, error_code)
            elif f.kafka_type.startswith("timedelta") and isinstance(value, (int, float)):
                value = datetime.timedelta(milliseconds=value)
            elif f.kafka_type == "error_code" and not isinstance(value, ErrorCode):
                value = ErrorCode(value)  # kio writes error codes only as ErrorCode members
            elif f.is_tuple and not isinstance(value, tuple):
                value = tuple(value)
            kwargs[f.name] = value
        elif f.required:
            kwargs[f.name] = _zero(cls, f, error_code)
    return cls(**kwargs)


def build(cls: type, fields: Mapping[str, Any] | None = None, /, **more: Any) -> Any:
    """A ``cls`` entity from ``fields`` (a nested dict of kio field names) and/or keywords.

    Fields ``cls`` lacks are dropped; required fields not given get their zero value (error
    code NONE, an empty array, an empty string or bytes, a zero uuid, duration or time).
    """
    if more:
        fields = {**fields, **more} if fields else more
    return _build(cls, fields or {}, 0)


def build_request(api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    """A kio request of ``api_key``/``version`` from a nested dict of kio field names."""
    return build(request_schema(api_key, version), fields)


def error_entity(cls: type, error_code: int) -> Any:
    """A ``cls`` entity with every error-code field (nested ones too) set to ``error_code``
    and everything else zero or empty: a response any client can decode as that error."""
    return _build(cls, {}, error_code)


def ms(value: Any) -> int:
    """A kio duration/time field as integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
