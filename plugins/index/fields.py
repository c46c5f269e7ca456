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

# (field, value, timestamp ms, offset): one index entry of a batch of one partition
Entry = tuple[str, str, int, int]


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


class Extractor:
    """The index's fields, applied to batches of ``ConsumerRecord``-shaped tuples."""

    def __init__(self, fields: dict[str, str], fmt: str = "json") -> None:
        if fmt not in ("json", "msgpack"):
            raise ValueError(f"index: format {fmt!r}: use json or msgpack")
        self.format = fmt
        self.fields = {name: parse_source(spec) for name, spec in fields.items()}
        self._needs_value = any(s.kind == "value" for s in self.fields.values())

    def _decode(self, value: bytes | None) -> Any:
        if value is None:
            return None
        if self.format == "json":
            return json.loads(value)
        return msgpack.unpackb(value)

    def entries(self, records: Iterable[Sequence[Any]]) -> tuple[list[Entry], dict]:
        """(entries, {(field, MISSING | UNDECODABLE): count}) of ``records`` (of one
        partition: an entry carries the record's offset, not its partition)."""
        out: list[Entry] = []
        append = out.append
        skipped: dict[tuple[str, str], int] = {}
        fields = list(self.fields.items())
        needs_value, decode, text_of = self._needs_value, self._decode, self._text
        value_errors = (ValueError, TypeError, msgpack.UnpackException)
        for record in records:
            offset, timestamp, key, value, headers = (
                record[2], record[3], record[5], record[6], record[7])
            decoded: Any = None
            bad_value = False
            if needs_value and value is not None:
                try:
                    decoded = decode(value)
                except value_errors:
                    bad_value = True
            for name, source in fields:
                try:
                    text = text_of(source, key, headers, decoded, bad_value)
                except _Undecodable:
                    skipped[name, UNDECODABLE] = skipped.get((name, UNDECODABLE), 0) + 1
                    continue
                if text is None:
                    skipped[name, MISSING] = skipped.get((name, MISSING), 0) + 1
                    continue
                append((name, text, timestamp, offset))
        return out, skipped

    @staticmethod
    def _text(source: Source, key, headers, decoded, bad_value: bool) -> str | None:
        if source.kind == "key":
            return as_text(key)
        if source.kind == "header":
            for name, raw in headers or ():
                if name == source.path[0]:
                    return as_text(raw)
            return None
        if bad_value:
            raise _Undecodable
        node = decoded
        for part in source.path:
            if not isinstance(node, dict):
                return None if node is None else _raise()
            node = node.get(part)
        return as_text(node)


def _raise():
    raise _Undecodable
