"""Where an index field is in a record, and its value as the text the index stores (pure:
no I/O, no trio).

A field's source is ``key`` (the key as UTF-8), ``header.NAME`` (the first header of that
name, as UTF-8) or ``value.PATH`` (a dotted path into the value, a JSON object or a msgpack
map; a bare ``PATH`` means the same).  Strings are stored as they are, integers in decimal,
booleans as ``true`` / ``false``, other numbers as JSON writes them: ``FIELD=VALUE`` in a
query is compared with that text.  A field that is absent (or null) is *missing*; a value
that does not decode, is not valid UTF-8, or is an object or a list is *undecodable*: both
are counted per field and the record is indexed by its other fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

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

    def __init__(self, fields: dict[str, str], fmt: str = "json") -> None:
        if fmt not in ("json", "msgpack"):
            raise ValueError(f"index: format {fmt!r}: use json or msgpack")
        self.format = fmt
        self.fields = {name: parse_source(spec) for name, spec in fields.items()}
        self._needs_value = any(s.kind == "value" for s in self.fields.values())
        self._decode = decode_json if fmt == "json" else msgpack.unpackb

    def entries(self, records: Iterable[Sequence[Any]]) -> tuple[dict[str, list[Entry]], dict]:
        """({field: [(value, timestamp, offset), ...]}, {(field, MISSING | UNDECODABLE):
        count}) of ``records`` (of one partition).

        This runs for every record indexed: the value is decoded once, and the common cases
        (a map, a str or int field) are tested inline rather than through calls."""
        skipped: dict[tuple[str, str], int] = {}
        out: dict[str, list[Entry]] = {name: [] for name in self.fields}
        plan = [(name, s.kind, s.path, out[name].append) for name, s in self.fields.items()]
        needs_value, decode = self._needs_value, self._decode
        value_errors = (ValueError, TypeError, msgpack.UnpackException)
        for record in records:
            offset, timestamp, value = record[2], record[3], record[6]
            decoded: Any = None
            bad_value = False
            if needs_value and value is not None:
                try:
                    decoded = decode(value)
                except value_errors:
                    bad_value = True
            for name, kind, path, append in plan:
                if kind == "value":
                    if bad_value:
                        node = _BAD
                    else:
                        node = decoded
                        for part in path:
                            if type(node) is dict:
                                node = node.get(part)
                            elif node is not None:
                                node = _BAD
                                break
                elif kind == "key":
                    node = record[5]
                else:
                    node = None
                    for header, raw in record[7] or ():
                        if header == path[0]:
                            node = raw
                            break
                kind_of = type(node)
                if kind_of is str:
                    append((node, timestamp, offset))
                    continue
                if kind_of is int:
                    append((str(node), timestamp, offset))
                    continue
                if node is None:
                    reason = MISSING
                elif node is _BAD:
                    reason = UNDECODABLE
                else:
                    try:
                        append((as_text(node), timestamp, offset))
                        continue
                    except _Undecodable:
                        reason = UNDECODABLE
                skipped[name, reason] = skipped.get((name, reason), 0) + 1
        return out, skipped
