"""Where an index field is in a record, and its value as the text the index stores (pure:
no I/O, no trio).

A field's source is ``key`` (the key as UTF-8), ``header.NAME`` (the first header of that
name, as UTF-8) or ``value.PATH`` (a dotted path into the value, a JSON object or a msgpack
map; a bare ``PATH`` means the same).  Strings are stored as they are, integers in decimal,
booleans as ``true`` / ``false``, other numbers as JSON writes them: ``FIELD=VALUE`` in a
query is compared with that text.  A field that is absent (or null) is *missing*; a value
that does not decode, is not valid UTF-8, or is an object or a list is *undecodable*: both
are counted per field and the record is indexed by its other fields.

JSON values are read by the C extension when it is built (plugins/index/_json_speedups.c:
the fields' nodes only, in one pass over each value, no whole-document decode); what it is
not sure to read as ``json.loads`` does (a malformed value, UTF-16, a lone surrogate...) it
leaves to the Python code below, which is also the whole path under DATABUS_PURE_PYTHON=1.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from databus.protocol.speedups import load_native

# the C reader, _json_speedups.c beside this module (None: json.loads does it all)
json_native = load_native(name="_json_speedups", package=__package__)

MISSING = "missing"
UNDECODABLE = "undecodable"

# (value, timestamp ms, offset): one index entry of a field, in a batch of one partition
Entry = tuple[str, int, int]


@dataclass(frozen=True)
class Source:
    kind: str  # "key" | "header" | "value"
    path: tuple[str, ...] = ()


def parse_source(spec: str) -> Source:
    if spec == "key":
        return Source("key")
    head, _, rest = spec.partition(".")
    if head == "header" and rest:
        return Source("header", (rest,))
    path = rest if head == "value" and rest else spec
    if not path or any(not part for part in path.split(".")):
        raise ValueError(f"index field source {spec!r}: use key, header.NAME or value.PATH")
    return Source("value", tuple(path.split(".")))


class _Undecodable(Exception):
    pass


def as_text(value: Any) -> str | None:
    """The stored text of a scalar; None for null; _Undecodable for a map or a list."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise _Undecodable from None
    if isinstance(value, (datetime.date, datetime.time)):  # Avro's logical types (registry)
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    raise _Undecodable


_scan_json = json.JSONDecoder().scan_once


def decode_json(value: bytes) -> Any:
    """``json.loads(value)``, without its per-call Python work when the value is plain UTF-8
    JSON with nothing around it (the scanner alone; else json.loads, which also reports the
    error)."""
    try:
        text = value.decode()
        decoded, end = _scan_json(text, 0)
        if end == len(text):
            return decoded
    except (UnicodeDecodeError, StopIteration, ValueError):
        pass
    return json.loads(value)


_BAD = object()  # a value path through something that is not a map


class Extractor:
    """The index's fields, applied to batches of ``ConsumerRecord``-shaped tuples."""

    def __init__(self, fields: dict[str, str], fmt: str = "json",
                 decode: Callable[[bytes], Any] | None = None) -> None:
        """``fmt`` json or msgpack, or ``registry`` with ``decode`` (a wire-format value's
        decoder, registry_values.py)."""
        if fmt not in ("json", "msgpack", "registry") or (fmt == "registry") != (
                decode is not None):
            raise ValueError(f"index: format {fmt!r}: use json, msgpack or registry")
        self.format = fmt
        self.fields = {name: parse_source(spec) for name, spec in fields.items()}
        self._needs_value = any(s.kind == "value" for s in self.fields.values())
        self._decode = decode or (decode_json if fmt == "json" else msgpack.unpackb)
        # The value fields' paths, read by the C extension in one pass over each JSON value
        # (its nodes are those of ``_walk``; what it leaves undecided is decoded here).
        self._paths = [s.path for s in self.fields.values() if s.kind == "value"]
        self._native = (json_native.json_fields if json_native is not None and fmt == "json"
                        and 0 < len(self._paths) <= 64 and all(
                            len(p) <= 100 and _utf8(p) for p in self._paths) else None)

    def entries(self, records: Sequence[Sequence[Any]]) -> tuple[dict[str, list[Entry]], dict]:
        """({field: [(value, timestamp, offset), ...]}, {(field, MISSING | UNDECODABLE):
        count}) of ``records`` (of one partition).

        This runs for every record indexed, so it works a column at a time (list
        comprehensions, no per-record calls): the values decoded, then per field the column of
        its nodes, then the entries of the common kinds (str, int), and only then, if some
        are left, the others one by one."""
        offsets = [r[2] for r in records]
        stamps = [r[3] for r in records]
        nodes = self._value_columns([r[6] for r in records]) if self._needs_value else {}
        skipped: dict[tuple[str, str], int] = {}
        out: dict[str, list[Entry]] = {}
        for name, source in self.fields.items():
            column = self._column(source, records, nodes)
            group = [(v, t, o) for v, t, o in zip(column, stamps, offsets) if type(v) is str]
            if len(group) < len(column):
                group += [(str(v), t, o) for v, t, o in zip(column, stamps, offsets)
                          if type(v) is int]
            if len(group) < len(column):
                for node, t, o in zip(column, stamps, offsets):
                    kind = type(node)
                    if kind is str or kind is int:
                        continue
                    if node is None:
                        reason = MISSING
                    elif node is _BAD:
                        reason = UNDECODABLE
                    else:
                        try:
                            group.append((as_text(node), t, o))
                            continue
                        except _Undecodable:
                            reason = UNDECODABLE
                    skipped[name, reason] = skipped.get((name, reason), 0) + 1
            out[name] = group
        return out, skipped

    def _value_columns(self, values: list) -> dict[tuple[str, ...], list]:
        """{path: the node of each value there} for the value fields."""
        if self._native is None:
            docs = self._documents(values)
            return {path: self._walk(path, docs) for path in self._paths}
        columns, undecided = self._native(values, self._paths, _BAD)
        if undecided:  # malformed or unusual values: json.loads decides, as without C
            docs = self._documents([values[i] for i in undecided])
            for path, column in zip(self._paths, columns):
                for i, node in zip(undecided, self._walk(path, docs)):
                    column[i] = node
        return dict(zip(self._paths, columns))

    def _documents(self, values: list) -> list:
        """The decoded values (None for a record without one, _BAD for one that does not
        decode)."""
        decode = self._decode
        try:
            return [decode(v) if v is not None else None for v in values]
        except (ValueError, TypeError, msgpack.UnpackException):
            pass  # some value does not decode: one by one
        docs = []
        for v in values:
            try:
                docs.append(decode(v) if v is not None else None)
            except (ValueError, TypeError, msgpack.UnpackException):
                docs.append(_BAD)
        return docs

    @staticmethod
    def _column(source: Source, records: Sequence[Sequence[Any]], nodes: dict) -> list:
        """The field's node in each record: a scalar, None (missing), _BAD (undecodable) or a
        map / list (undecodable too, found later)."""
        if source.kind == "key":
            return [r[5] for r in records]
        if source.kind == "header":
            header = source.path[0]
            return [next((raw for h, raw in r[7] or () if h == header), None) for r in records]
        return nodes[source.path]

    @staticmethod
    def _walk(path: tuple[str, ...], docs: list) -> list:
        """The node at ``path`` of each decoded value."""
        column = docs
        for part in path:  # a step into a map; through anything else: _BAD
            column = [n.get(part) if type(n) is dict else n if n is None or n is _BAD else _BAD
                      for n in column]
        return column


def _utf8(path: tuple[str, ...]) -> bool:
    """Whether every key of ``path`` is valid UTF-8 (a lone surrogate is not: such a key
    is matched in Python)."""
    try:
        for part in path:
            part.encode()
    except UnicodeEncodeError:
        return False
    return True
