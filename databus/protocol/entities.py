"""Build kio request objects for whichever version was negotiated, from plain dicts.

kio has one frozen dataclass per (api key, version) and the field sets differ between
versions.  The client states what it wants once, as nested dicts with kio's field names, and
``build_request(api_key, version, fields)`` keeps only the fields that version has, converts
milliseconds to the ``timedelta`` kio expects, builds nested entities, and fills required
fields the caller did not mention with their zero value (e.g. a topic id the version wants
but the client addresses by name).  This keeps version handling out of every call site.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from ..protocol.framing import request_schema


@cache
def _plan(cls: type) -> tuple[tuple[str, str, Any, bool, bool], ...]:
    """(name, kafka_type, nested entity class or None, required, is a tuple) per field."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        nested = None
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            non_none = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = non_none[0] if len(non_none) == 1 else hint
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            nested = args[0]
        elif dataclasses.is_dataclass(hint):
            nested = hint
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plan.append((f.name, kafka_type, nested, required, typing.get_origin(hint) is tuple))
    return tuple(plan)


def _zero(kafka_type: str, is_tuple: bool) -> Any:
    if is_tuple:
        return ()
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    return 0


def build_entity(cls: type, fields: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for name, kafka_type, nested, required, is_tuple in _plan(cls):
        if name in fields:
            value = fields[name]
            if nested is not None and value is not None:
                if is_tuple:
                    value = tuple(
                        v if isinstance(v, nested) else build_entity(nested, v) for v in value
                    )
                elif not isinstance(value, nested):
                    value = build_entity(nested, value)
            elif kafka_type.startswith("timedelta") and isinstance(value, (int, float)):
                value = datetime.timedelta(milliseconds=value)
            elif is_tuple and value is not None and not isinstance(value, tuple):
                value = tuple(value)
            kwargs[name] = value
        elif required:
            kwargs[name] = _zero(kafka_type, is_tuple)
    return cls(**kwargs)


def build_request(api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    """A kio request of ``api_key``/``version`` from a nested dict of kio field names."""
    return build_entity(request_schema(api_key, version), fields)


def ms(value: Any) -> int:
    """A kio duration/time field as integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)
