"""Answers for requests the broker does not handle: UNSUPPORTED_VERSION instead of silence.

Every request gets a response, an error or a bounded wait, never a hang.  For an API key and
version that kio has a response schema for, we build that response with every error code
set to UNSUPPORTED_VERSION and everything else empty/zero (``error_response``); a client
that decodes it sees a clean error.  For a key or version nobody has a schema for, the body
is just the int16 error code (``bare_error_body``): the correlation id still matches, so a
pipelining client is not left waiting.  ApiVersions itself is special (handlers/api_versions).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import types
import typing
import uuid
from functools import cache

from kio.schema.errors import ErrorCode

from databus.protocol.framing import response_schema

_ZERO_BY_TYPE: dict[str, object] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "float64": 0.0,
    "bool": False, "string": "", "bytes": b"", "records": None,
    "uuid": uuid.UUID(int=0), "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}


def _is_tuple(tp) -> bool:
    origin = typing.get_origin(tp)
    if origin is tuple:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_tuple(arg) for arg in typing.get_args(tp))
    return False


def _allows_none(tp) -> bool:
    return type(None) in typing.get_args(tp)


def _build(schema: type, code: ErrorCode):
    values = {}
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        if field.default is not dataclasses.MISSING or (
            field.default_factory is not dataclasses.MISSING  # type: ignore[misc]
        ):
            continue
        tp = hints.get(field.name, field.type)
        kafka_type = field.metadata.get("kafka_type")
        if kafka_type == "error_code":
            values[field.name] = code
        elif _is_tuple(tp):
            values[field.name] = ()
        elif kafka_type in _ZERO_BY_TYPE:
            zero = _ZERO_BY_TYPE[kafka_type]
            if zero is None and not _allows_none(tp):
                zero = b""
            values[field.name] = zero
        elif dataclasses.is_dataclass(tp):
            values[field.name] = _build(tp, code)
        elif _allows_none(tp):
            values[field.name] = None
        else:
            raise TypeError(f"cannot build a default for {schema.__name__}.{field.name}")
    return schema(**values)


@cache
def error_response(api_key: int, version: int, code: ErrorCode = ErrorCode.unsupported_version):
    """A kio response of this key/version carrying ``code``; LookupError if kio lacks one."""
    try:
        schema = response_schema(api_key, version)
    except Exception:
        raise LookupError(f"no response schema for api key {api_key} v{version}") from None
    return _build(schema, code)


def bare_error_body(code: ErrorCode = ErrorCode.unsupported_version) -> bytes:
    return struct.pack(">h", int(code))
