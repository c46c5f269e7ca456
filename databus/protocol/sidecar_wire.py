"""The sidecar wire format: length-prefixed msgpack maps between an app's SDK and the sidecar.

This module owns the bytes (framing, frame shapes, validation, error codes) and nothing else:
no sockets, no trio.  docs/sidecar-protocol.md is the human-readable version of it; the tests
pin its golden bytes so the two cannot drift.

A frame is a 4-byte big-endian unsigned length ``N`` followed by ``N`` bytes holding one
msgpack map (strings as msgpack str, payloads as msgpack bin).  Every map has a ``type``.

App -> sidecar: ``hello`` (first frame, carries the protocol version), ``produce`` (one or
many messages, each ``[id, stream, value, key, headers, partition, timestamp]`` with trailing
nils omittable), ``flush`` and ``ping``.
Sidecar -> app: ``hello``, ``reports`` (one delivery report or error per message, in any
order), ``flushed``, ``pong`` and ``error`` (fatal for that connection, which is then closed).

Version 2 adds *group reports*: one report item answering many messages, ``[ids, 0, topic,
partition, first_offset, timestamp(s)]`` or ``[ids, code, message]``, where ``ids`` is an
array of message ids.  The sidecar produces them a batch at a time, so a report costs per
batch, not per message.  A version 1 connection gets them expanded (``expand_report``).

Version 3 adds consuming: ``subscribe`` (answered by ``subscribed``), ``fetch`` (a long poll,
answered by exactly one ``messages`` frame), ``ack``, ``nack`` and ``unsubscribe`` (answered
by ``unsubscribed``, which the sidecar also sends by itself when it ends a subscription).
Each consumed message is ``[delivery_id, partition, offset, timestamp, attempt, value, key,
headers]`` with trailing nils omittable; acks and nacks name messages by delivery id.
"""

from __future__ import annotations

import enum
import os
import struct
from typing import Any, NamedTuple

import msgpack

from .speedups import sidecar_native

# A produce frame's body straight to message tuples, message tuples straight to produce
# frames, and report items straight to a reports frame, in C (None: the Python code here)
_parse_produce_c = sidecar_native.parse_produce if sidecar_native is not None else None
_encode_produce_c = sidecar_native.encode_produce if sidecar_native is not None else None
_encode_reports_c = sidecar_native.encode_reports if sidecar_native is not None else None
_encode_messages_c = getattr(sidecar_native, "encode_messages", None)

# Where apps find the sidecar: $DATABUS_SOCKET, else this path (sidecar.yaml's default too).
DEFAULT_SOCKET = "/tmp/databus/databus.sock"
SOCKET_ENV = "DATABUS_SOCKET"
TOKEN_ENV = "DATABUS_TOKEN"  # the app's token for a sidecar with sidecar.tokens

PROTOCOL_VERSION = 3
SUPPORTED_VERSIONS = frozenset({1, 2, 3})
CONSUME_VERSION = 3  # the first version with subscribe/fetch/ack/nack
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
LENGTH_PREFIX = struct.Struct(">I")

# Delayed messages (docs/delayed.md) travel as ordinary produce messages whose FIRST header is
# one of these two: the sidecar routes a message with ``databus-deliver-at`` (due time, ms
# since the epoch, ASCII digits; ``databus-delay-id`` may follow) to its delay topics, and
# one with ``databus-delay-cancel`` (the id) to the cancel topic.  The other two name the
# target topic and partition on the stored record.
DELAY_DUE_HEADER = "databus-deliver-at"
DELAY_ID_HEADER = "databus-delay-id"
DELAY_CANCEL_HEADER = "databus-delay-cancel"
DELAY_TARGET_HEADER = "databus-delay-target"
DELAY_PARTITION_HEADER = "databus-delay-partition"
# Transactional (half) messages (docs/transactions.md): a message whose first header is
# ``databus-txn`` (the transaction id; ``databus-txn-group`` second) is a half message; one
# whose first header is ``databus-txn-end`` ends the transaction (value commit/rollback).
TXN_HEADER = "databus-txn"
TXN_GROUP_HEADER = "databus-txn-group"
TXN_END_HEADER = "databus-txn-end"
TXN_TARGET_HEADER = "databus-txn-target"
TXN_PARTITION_HEADER = "databus-txn-partition"


class ErrorCode(enum.IntEnum):
    """Error codes in reports and error frames.

    Codes below 1000 are Kafka's own (passed through from the upstream cluster, so an app sees
    exactly what a Kafka producer would); 1000 and above are the sidecar's.  The Kafka codes
    named here are those the sidecar sends itself, under Kafka's names and numbers (a test
    holds them to databus/protocol/errors.py); they are repeated because the SDK must not
    load kio.
    """

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    # a typed stream's message the schema does not take (docs/schemas.md, "Typed streams")
    INVALID_RECORD = 87
    # sidecar codes
    UNKNOWN_STREAM = 1000
    BUFFER_EXHAUSTED = 1001
    MALFORMED_FRAME = 1002
    FRAME_TOO_LARGE = 1003
    HELLO_REQUIRED = 1004
    PLUGIN_ERROR = 1005
    SHUTTING_DOWN = 1006
    INVALID_MESSAGE = 1007
    INVALID_SUBSCRIPTION = 1008
    UNKNOWN_SUBSCRIPTION = 1009
    # sidecar.tokens: the hello's token is missing or unknown (error frame, then closed) /
    # the app's token does not allow this stream (the message's report)
    UNAUTHORIZED = 1010
    STREAM_NOT_ALLOWED = 1011


def error_name(code: int) -> str:
    """Kafka's or the sidecar's upper-case name for ``code`` (``UNKNOWN_<n>`` if neither)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        pass
    from .errors import error_name as kafka_error_name  # here, not above: it loads kio

    return kafka_error_name(code)


class WireError(ValueError):
    """Bytes that break the protocol; the connection that sent them gets an error frame and
    is closed.  ``code`` is the ErrorCode to put in that frame."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Message(NamedTuple):
    """One message of a produce frame, validated."""

    id: int
    stream: str
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] | None = None
    partition: int | None = None
    timestamp: int | None = None


def default_socket_path() -> str:
    """The socket an SDK connects to when given none: $DATABUS_SOCKET, else the default."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


# --- encoding ---------------------------------------------------------------------------

# One packer for every frame (str as str, bytes as bin).  Its pack() runs without releasing
# the GIL, so SDK I/O threads of several clients may share it.
_pack = msgpack.Packer(use_bin_type=True).pack
_prefix = LENGTH_PREFIX.pack


def encode_frame(frame: dict[str, Any]) -> bytes:
    """One frame: length prefix + msgpack map (str as str, bytes as bin)."""
    body = _pack(frame)
    return _prefix(len(body)) + body


def append_frame(out: bytearray, frame: dict[str, Any]) -> int:
    """Append one frame to ``out`` (no intermediate bytes object); returns its length."""
    body = _pack(frame)
    out += _prefix(len(body))
    out += body
    return 4 + len(body)


# msgpack's framing around one message in a produce frame: the frame's map and type, the
# message's array, its id and the lengths of its fields (generous: a bound, not an estimate).
MESSAGE_OVERHEAD = 64


def message_estimate(item: tuple) -> int:
    """A queued message's bytes on the wire (``message_array`` form), near enough to cut
    frames under max_frame_bytes: an upper bound for any stream name in ASCII."""
    size = MESSAGE_OVERHEAD + len(item[1]) + (len(item[2]) if item[2] else 0)
    if len(item) > 3:
        size += len(item[3]) if item[3] else 0
        if len(item) > 4 and item[4]:
            size += sum(len(k) + (len(v) if v else 0) + 8 for k, v in item[4])
    return size


def append_produce(out: bytearray, queue: list, start: int, end: int, max_messages: int,
                   limit: int = -1) -> int:
    """Append ``queue[start:end]`` (message arrays, as tuples or lists) to ``out`` as
    produce frames of at most ``max_messages`` each; with ``limit`` >= 0 a frame is also
    cut before a message whose ``message_estimate`` would take the frame's past ``limit``.
    Returns the bytes appended.  (The SDK's encoder: the C extension writes the same bytes
    without a msgpack call; anything it does not pack, it leaves to this code.)"""
    if _encode_produce_c is not None:
        # written straight into out: no frames' bytes object to make and copy again
        written = _encode_produce_c(queue, start, end, max_messages, limit, MESSAGE_OVERHEAD,
                                    out)
        if written is not None:
            return written
    written = 0
    if limit >= 0:
        first, size = start, 0
        for i in range(start, end):
            item_size = message_estimate(queue[i])
            if i > first and (size + item_size > limit or i - first >= max_messages):
                written += append_frame(out, produce(queue[first:i]))
                first, size = i, 0
            size += item_size
        if first < end:
            written += append_frame(out, produce(queue[first:end]))
        return written
    for first in range(start, end, max_messages):
        written += append_frame(out, produce(queue[first : min(end, first + max_messages)]))
    return written


def encode_reports(items: list[list[Any]]) -> bytes:
    """A reports frame answering ``items`` (single or group report items).  (The sidecar's
    encoder: the C extension writes the same bytes without a msgpack call; anything it does
    not pack, it leaves to this code.)"""
    if _encode_reports_c is not None:
        data = _encode_reports_c(items)
        if data is not None:
            return data
    return encode_frame({"type": "reports", "reports": items})


def hello(client: str, version: int = PROTOCOL_VERSION,
          token: str | None = None) -> dict[str, Any]:
    """An app's hello; ``token`` only when the sidecar asks for one (``sidecar.tokens``)."""
    frame: dict[str, Any] = {"type": "hello", "version": version, "client": client}
    if token is not None:
        frame["token"] = token
    return frame


# What a sidecar can do beyond its protocol version, named in its hello's ``features``: an
# additive field (an older SDK ignores it, an older sidecar sends none), so a new ability
# needs no version bump and no extra round of hellos.
FEATURE_ACK_RANGES = "ack_ranges"  # an ack frame may carry ``ranges`` of delivery ids
FEATURES = (FEATURE_ACK_RANGES,)


def hello_reply(
    server: str, max_frame_bytes: int, max_block_ms: int, version: int = PROTOCOL_VERSION
) -> dict[str, Any]:
    """The sidecar's hello; ``version`` is the one this connection speaks (the app's)."""
    frame: dict[str, Any] = {
        "type": "hello",
        "version": version,
        "server": server,
        "max_frame_bytes": max_frame_bytes,
        "max_block_ms": max_block_ms,
    }
    if version >= CONSUME_VERSION:
        frame["features"] = list(FEATURES)
    return frame


def message_array(
    id: int,
    stream: str,
    value: bytes | None,
    key: bytes | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
    timestamp: int | None = None,
) -> list[Any]:
    """The array form of one message, with trailing nils dropped (they are optional)."""
    fields = [id, stream, value, key, headers, partition, timestamp]
    while len(fields) > 3 and fields[-1] is None:
        fields.pop()
    return fields


def produce(messages: list[list[Any]]) -> dict[str, Any]:
    return {"type": "produce", "messages": messages}


def report_ok(id: int, topic: str, partition: int, offset: int, timestamp: int) -> list[Any]:
    return [id, 0, topic, partition, offset, timestamp]


def report_error(id: int, code: int, message: str) -> list[Any]:
    return [id, int(code), message]


def report_group_ok(
    ids: list[int], topic: str, partition: int, first_offset: int, timestamp: int | list[int]
) -> list[Any]:
    """Version 2: ``ids[i]`` landed at ``first_offset + i`` (every offset -1 when
    ``first_offset`` is -1, as with acks=0).  ``timestamp``: one for all, or one per id."""
    return [ids, 0, topic, partition, first_offset, timestamp]


def report_group_error(ids: list[int], code: int, message: str) -> list[Any]:
    """Version 2: every message in ``ids`` failed with ``code``."""
    return [ids, int(code), message]


def report_delivery(item: list[Any], index: int) -> tuple[str, int, int, int]:
    """(topic, partition, offset, timestamp) of a delivered report item: the message itself
    for a single report (``index`` -1), else the ``index``-th message of a group report."""
    if index < 0:
        return item[2], item[3], item[4], item[5]
    first, timestamp = item[4], item[5]
    return (
        item[2], item[3], first + index if first >= 0 else -1,
        timestamp[index] if type(timestamp) is list else timestamp,
    )


def expand_report(item: list[Any]) -> list[list[Any]]:
    """The per-message reports (version 1 forms) a report item stands for."""
    ids = item[0]
    if type(ids) is not list:
        return [item]
    if item[1] != 0:
        return [[id_, item[1], item[2]] for id_ in ids]
    return [[id_, 0, *report_delivery(item, i)] for i, id_ in enumerate(ids)]


def reports(items: list[list[Any]]) -> dict[str, Any]:
    return {"type": "reports", "reports": items}


def flush(id: int) -> dict[str, Any]:
    return {"type": "flush", "id": id}


def flushed(id: int) -> dict[str, Any]:
    return {"type": "flushed", "id": id}


def ping(id: int) -> dict[str, Any]:
    return {"type": "ping", "id": id}


def pong(id: int) -> dict[str, Any]:
    return {"type": "pong", "id": id}


def checks(groups: list[str]) -> dict[str, Any]:
    """App -> sidecar: this connection answers check-backs of these producer groups."""
    return {"type": "checks", "groups": list(groups)}


def check(group: str, txn: str) -> dict[str, Any]:
    """Sidecar -> app: is transaction ``txn`` of producer group ``group`` committed?  The
    app answers with an end message (first header ``databus-txn-end``)."""
    return {"type": "check", "group": group, "txn": txn}


def parse_checks(frame: dict[str, Any]) -> list[str]:
    groups = frame.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise WireError(ErrorCode.MALFORMED_FRAME,
                        "checks frame: groups must be an array of non-empty strings")
    return groups


def error(code: int, message: str) -> dict[str, Any]:
    return {"type": "error", "code": int(code), "message": message}


# --- consuming (version 3) ----------------------------------------------------------------

# The header a message's tag travels in (``send(..., tag=...)``; ``subscribe(tags=...)``
# filters on it in the sidecar).
TAG_HEADER = "databus-tag"


def subscribe(
    id: int, stream: str, group: str, tags: list[str] | None = None, max_in_flight: int = 1000
) -> dict[str, Any]:
    return {
        "type": "subscribe", "id": id, "stream": stream, "group": group, "tags": tags,
        "max_in_flight": max_in_flight,
    }


def subscribed(id: int, code: int = 0, message: str | None = None, topic: str | None = None,
               ordering: str | None = None) -> dict[str, Any]:
    """The answer to subscribe ``id``: code 0 with the stream's topic and ordering, or an
    error code and message (the subscription does not exist then)."""
    if code:
        return {"type": "subscribed", "id": id, "code": int(code), "message": message}
    return {"type": "subscribed", "id": id, "code": 0, "topic": topic, "ordering": ordering}


def fetch(id: int, max_messages: int, max_wait_ms: int = 500, min_bytes: int = 1) -> dict[str, Any]:
    """Long poll of subscription ``id``: answered once ``min_bytes`` of messages are ready or
    ``max_wait_ms`` passed, with at most ``max_messages`` (Kafka's fetch.min.bytes and
    fetch.max.wait.ms, on the socket)."""
    return {
        "type": "fetch", "id": id, "max_messages": max_messages, "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
    }


def consumed_array(
    delivery_id: int, partition: int, offset: int, timestamp: int, attempt: int,
    value: bytes | None, key: bytes | None = None, headers: Any = None,
) -> list[Any]:
    """One consumed message, trailing nils dropped."""
    if headers:
        return [delivery_id, partition, offset, timestamp, attempt, value, key, headers]
    if key is not None:
        return [delivery_id, partition, offset, timestamp, attempt, value, key]
    return [delivery_id, partition, offset, timestamp, attempt, value]


def messages(id: int, items: list[list[Any]]) -> dict[str, Any]:
    return {"type": "messages", "id": id, "messages": items}


def encode_messages(id: int, entries: list[Any]) -> bytes:
    """The ``messages`` frame answering a fetch of subscription ``id`` with ``entries``
    (objects with ``delivery_id``, ``attempt`` and ``rec``, a record with ``partition``,
    ``offset``, ``timestamp``, ``value``, ``key``, ``headers``: consume/core.py's Entry),
    encoded.  The C twin packs straight from them, with no list per message."""
    if _encode_messages_c is not None:
        data = _encode_messages_c(id, entries)
        if data is not None:
            return data
    return encode_messages_py(id, entries)


def encode_messages_py(id: int, entries: list[Any]) -> bytes:
    """``encode_messages`` in Python (the twin the C one is tested against)."""
    items = []
    for e in entries:
        r = e.rec
        fields = [e.delivery_id, r.partition, r.offset, r.timestamp, e.attempt, r.value]
        if r.headers:
            fields += [r.key, [list(h) for h in r.headers]]
        elif r.key is not None:
            fields.append(r.key)
        items.append(fields)
    return encode_frame(messages(id, items))


def ack(id: int, ids: list[int], ranges: list[list[int]] | None = None) -> dict[str, Any]:
    """Acks of delivery ``ids``, and (a sidecar with the ``ack_ranges`` feature) of every id
    in each inclusive ``[first, last]`` of ``ranges``: an app acking in order acks thousands
    of messages with one pair."""
    if ranges:
        return {"type": "ack", "id": id, "ids": ids, "ranges": ranges}
    return {"type": "ack", "id": id, "ids": ids}


def ack_runs(ids: list[int]) -> tuple[list[int], list[list[int]]]:
    """Distinct delivery ids as (ids left single, ``[first, last]`` runs of 2 or more): the
    ack frame's two fields.  Acks in order cost one comparison (the ids are distinct, so
    max - min == count - 1 means they are every id from min to max)."""
    if not ids:
        return [], []
    low, high = min(ids), max(ids)
    if high - low == len(ids) - 1:
        return ([], [[low, high]]) if high > low else (ids, [])
    ordered = sorted(ids)
    singles: list[int] = []
    runs: list[list[int]] = []
    start = prev = ordered[0]
    for i in ordered[1:]:
        if i != prev + 1:
            if prev > start:
                runs.append([start, prev])
            else:
                singles.append(start)
            start = i
        prev = i
    if prev > start:
        runs.append([start, prev])
    else:
        singles.append(start)
    return singles, runs


def nack(id: int, items: list[list[Any]]) -> dict[str, Any]:
    """``items``: ``[delivery_id, delay_ms or nil, reason or nil]`` each."""
    return {"type": "nack", "id": id, "nacks": items}


def unsubscribe(id: int) -> dict[str, Any]:
    return {"type": "unsubscribe", "id": id}


def unsubscribed(id: int, code: int = 0, message: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "unsubscribed", "id": id, "code": int(code)}
    if message is not None:
        frame["message"] = message
    return frame


# --- decoding ---------------------------------------------------------------------------


def _reject_ext(code: int, data: bytes) -> Any:
    raise WireError(ErrorCode.MALFORMED_FRAME, f"msgpack extension type {code} is not allowed")


class FrameDecoder:
    """Sans-I/O frame splitter and decoder, linear in the bytes fed however they are cut.

    ``receive(data)`` hands it bytes; ``next_frame()`` returns the next complete frame as a
    dict, or None until more bytes arrive; ``feed(data)`` does both and returns a list.
    Frames that lie whole inside one ``data`` are decoded in place (no copy); only the
    bytes of a frame cut by a read boundary are copied, once each, into a buffer that
    holds that one frame (``copied_bytes`` counts them).  The length prefix is checked
    against ``max_frame_bytes`` before the body is buffered, so a hostile 4 GiB prefix
    costs nothing.  Any violation raises WireError; the decoder is then unusable (the
    connection must be closed).

    ``decode`` turns a frame's body into what ``next_frame`` returns: ``decode_body`` (a
    map), or ``decode_body_or_produce`` (the sidecar's, once an app said hello).
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.decode: Any = decode_body
        self.copied_bytes = 0  # bytes copied into the pending-frame buffer, ever
        self._pending = bytearray()  # the start of a frame cut by a read boundary
        self._need = 0  # the pending frame's whole length (prefix included); 0: unknown yet
        self._data: memoryview | None = None  # the bytes received last, not yet consumed
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received that are not part of a returned frame yet."""
        rest = len(self._data) - self._pos if self._data is not None else 0
        return len(self._pending) + rest

    @property
    def pending_frame_size(self) -> int:
        """The whole length (prefix included) of the frame being received, once its prefix
        is known; 0 otherwise.  What a server reserves before reading on."""
        return self._need

    def receive(self, data: bytes) -> None:
        """Take ``data`` (kept by reference until ``next_frame`` has consumed it)."""
        if self._data is not None and self._pos < len(self._data):
            # Frames left unread (the caller stopped early): keep them in front.  Never
            # happens on the paths that drain next_frame() after each receive().
            rest = self._data[self._pos :]
            self.copied_bytes += len(rest)
            data = bytes(rest) + data
        self._data = memoryview(data)
        self._pos = 0

    def next_frame(self) -> dict[str, Any] | None:
        data = self._data
        if data is None:
            return None
        pos = self._pos
        end = len(data)
        if self._pending:
            return self._continue_pending(data, pos, end)
        if end - pos < 4:
            self._stash()
            return None
        (size,) = LENGTH_PREFIX.unpack_from(data, pos)
        self._check(size)
        if end - pos - 4 < size:
            self._need = 4 + size
            self._stash()
            return None
        self._pos = pos + 4 + size
        return self.decode(data[pos + 4 : pos + 4 + size])

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """``receive(data)``, then every frame complete so far."""
        self.receive(data)
        frames = []
        while (frame := self.next_frame()) is not None:
            frames.append(frame)
        return frames

    def _check(self, size: int) -> None:
        if size > self.max_frame_bytes:
            raise WireError(
                ErrorCode.FRAME_TOO_LARGE,
                f"frame of {size} bytes exceeds max_frame_bytes={self.max_frame_bytes}",
            )

    def _stash(self) -> None:
        """Copy the unread rest of the received bytes (the start of one frame) into the
        pending-frame buffer."""
        data = self._data
        if data is not None:
            rest = data[self._pos :]
            self._pending += rest
            self.copied_bytes += len(rest)
        self._data = None
        self._pos = 0

    def _continue_pending(self, data: memoryview, pos: int, end: int) -> dict[str, Any] | None:
        pending = self._pending
        if not self._need:  # the prefix itself was cut: complete it first
            take = min(4 - len(pending), end - pos)
            pending += data[pos : pos + take]
            self.copied_bytes += take
            pos += take
            if len(pending) < 4:
                self._pos = pos
                self._stash()
                return None
            (size,) = LENGTH_PREFIX.unpack_from(pending, 0)
            self._check(size)
            self._need = 4 + size
        take = min(self._need - len(pending), end - pos)
        pending += data[pos : pos + take]
        self.copied_bytes += take
        self._pos = pos + take
        if len(pending) < self._need:
            self._stash()
            return None
        # A new buffer for the next cut frame: the frame decoded here may hold views of it.
        self._pending = bytearray()
        self._need = 0
        return self.decode(memoryview(pending)[4:])


def decode_body(body: bytes | memoryview) -> dict[str, Any]:
    """Decode one frame body (without its prefix) into a map with a str ``type``."""
    try:
        frame = msgpack.unpackb(body, raw=False, ext_hook=_reject_ext, strict_map_key=True)
    except WireError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise WireError(ErrorCode.MALFORMED_FRAME, f"invalid msgpack: {exc}") from None
    if not isinstance(frame, dict):
        raise WireError(
            ErrorCode.MALFORMED_FRAME, f"a frame must be a msgpack map, got {type(frame).__name__}"
        )
    kind = frame.get("type")
    if not isinstance(kind, str):
        raise WireError(ErrorCode.MALFORMED_FRAME, "a frame needs a string 'type'")
    return frame


def decode_body_or_produce(body: bytes | memoryview) -> dict[str, Any] | tuple[list, list]:
    """``decode_body``, except that a produce frame comes back as ``parse_produce``'s
    ``(messages, sizes)`` tuple instead of its map (the sidecar's hot path, once per frame).
    The C extension reads the common shape straight into those tuples; any other body (and
    every malformed one) is decoded and checked here, so the errors are this module's."""
    if _parse_produce_c is not None:
        parsed = _parse_produce_c(body)
        if parsed is not None:
            return parsed
    frame = decode_body(body)
    if frame["type"] == "produce":
        return parse_produce(frame)
    return frame


def frame_int(frame: dict[str, Any], field: str) -> int:
    """A required non-negative integer field (ids, versions)."""
    value = frame.get(field)
    if type(value) is not int or value < 0:
        raise WireError(
            ErrorCode.MALFORMED_FRAME,
            f"{frame.get('type')} frame: '{field}' must be a non-negative integer",
        )
    return value


def check_hello(frame: dict[str, Any]) -> int:
    """Validate an app's hello; returns the protocol version to speak."""
    if frame.get("type") != "hello":
        raise WireError(
            ErrorCode.HELLO_REQUIRED, f"the first frame must be hello, got {frame.get('type')!r}"
        )
    version = frame_int(frame, "version")
    if version not in SUPPORTED_VERSIONS:
        raise WireError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"protocol version {version} is not supported (supported: "
            f"{sorted(SUPPORTED_VERSIONS)})",
        )
    return version


def _malformed(kind: str, what: str) -> WireError:
    return WireError(ErrorCode.MALFORMED_FRAME, f"{kind} frame: {what}")


def parse_subscribe(frame: dict[str, Any]) -> tuple[int, str, str, tuple[str, ...] | None, int]:
    """(id, stream, group, tags or None, max_in_flight) of a subscribe frame."""
    id_ = frame_int(frame, "id")
    stream, group, tags = frame.get("stream"), frame.get("group"), frame.get("tags")
    if type(stream) is not str or not stream:
        raise _malformed("subscribe", "'stream' must be a non-empty string")
    if type(group) is not str or not group:
        raise _malformed("subscribe", "'group' must be a non-empty string")
    if tags is not None:
        if type(tags) is not list or not all(type(t) is str and t for t in tags):
            raise _malformed("subscribe", "'tags' must be an array of non-empty strings or nil")
        tags = None if "*" in tags else tuple(sorted(set(tags)))
    window = frame.get("max_in_flight", 1000)
    if type(window) is not int or window < 1:
        raise _malformed("subscribe", "'max_in_flight' must be a positive integer")
    return id_, stream, group, tags, window


def parse_fetch(frame: dict[str, Any]) -> tuple[int, int, int, int]:
    """(id, max_messages, max_wait_ms, min_bytes) of a fetch frame."""
    return (
        frame_int(frame, "id"), frame_int(frame, "max_messages"),
        frame_int(frame, "max_wait_ms"), frame_int(frame, "min_bytes"),
    )


def parse_ack(frame: dict[str, Any]) -> tuple[int, list[int], list[tuple[int, int]]]:
    """(subscription, ids, inclusive ranges); ``ids`` may be absent when ``ranges`` is not."""
    ids = frame.get("ids", [] if "ranges" in frame else None)
    if type(ids) is not list or not all(type(i) is int for i in ids):
        raise _malformed("ack", "'ids' must be an array of delivery ids")
    raw = frame.get("ranges")
    ranges: list[tuple[int, int]] = []
    if raw is not None:
        if type(raw) is not list:
            raise _malformed("ack", "'ranges' must be an array of [first, last] pairs")
        for pair in raw:
            if (type(pair) is not list or len(pair) != 2 or type(pair[0]) is not int
                    or type(pair[1]) is not int or not 0 <= pair[0] <= pair[1]):
                raise _malformed("ack", "each range is [first, last], 0 <= first <= last")
            ranges.append((pair[0], pair[1]))
    return frame_int(frame, "id"), ids, ranges


def parse_nack(frame: dict[str, Any]) -> tuple[int, list[tuple[int, int | None, str | None]]]:
    items = frame.get("nacks")
    if type(items) is not list:
        raise _malformed("nack", "'nacks' must be an array")
    out = []
    for item in items:
        if (
            type(item) is not list or not 1 <= len(item) <= 3 or type(item[0]) is not int
        ):
            raise _malformed("nack", "each nack is [delivery_id, delay_ms or nil, reason or nil]")
        delay = item[1] if len(item) > 1 else None
        reason = item[2] if len(item) > 2 else None
        if delay is not None and (type(delay) is not int or delay < 0):
            raise _malformed("nack", "delay_ms must be a non-negative integer or nil")
        if reason is not None and type(reason) is not str:
            raise _malformed("nack", "reason must be a string or nil")
        out.append((item[0], delay, reason))
    return frame_int(frame, "id"), out


def _bad(index: int, what: str) -> WireError:
    return WireError(ErrorCode.MALFORMED_FRAME, f"produce frame: message {index}: {what}")


def parse_messages(frame: dict[str, Any]) -> list[tuple]:
    """Validate a produce frame's messages: tuples in ``Message``'s field order.  Any
    malformed message fails the whole frame (the protocol is broken, not just one message)."""
    return parse_produce(frame)[0]


def parse_produce(frame: dict[str, Any]) -> tuple[list[tuple], list[int]]:
    """``parse_messages`` plus each message's payload size (key + value + header names and
    values, in bytes: what buffer.memory counts), found in the same pass."""
    raw = frame.get("messages")
    if type(raw) is not list:
        raise WireError(ErrorCode.MALFORMED_FRAME, "produce frame: 'messages' must be an array")
    out: list[tuple] = []
    sizes: list[int] = []
    append = out.append
    add_size = sizes.append
    for item in raw:
        # The common shapes, [id, stream, value] and [id, stream, value, key], checked inline;
        # anything else (or anything wrong) takes the general path below.
        if type(item) is list and 3 <= len(item) <= 4:
            id_, stream, value, key = item if len(item) == 4 else (*item, None)
            if (
                type(id_) is int and id_ >= 0 and type(stream) is str
                and (value is None or type(value) is bytes)
                and (key is None or type(key) is bytes)
            ):
                append((id_, stream, value, key, None, None, None))
                add_size((len(value) if value else 0) + (len(key) if key else 0))
                continue
        message = _parse_message(len(out), item)
        append(message)
        add_size(payload_size(message))
    return out, sizes


def payload_size(message: tuple) -> int:
    """Key + value + header bytes of a parsed message."""
    value, key, headers = message[2], message[3], message[4]
    size = (len(value) if value else 0) + (len(key) if key else 0)
    if headers:
        for name, data in headers:
            size += len(name) + (len(data) if data else 0)
    return size


def _parse_message(index: int, item: Any) -> tuple:
    if type(item) is not list or not 3 <= len(item) <= 7:
        raise _bad(index, "must be an array of 3 to 7 fields")
    fields: tuple[Any, ...] = (*item, *_PAD[len(item)])
    id_, stream, value, key, headers, partition, timestamp = fields
    if type(id_) is not int or id_ < 0:
        raise _bad(index, "id must be a non-negative integer")
    if type(stream) is not str:
        raise _bad(index, "stream must be a string")
    if value is not None and type(value) is not bytes:
        raise _bad(index, "value must be bin or nil")
    if key is not None and type(key) is not bytes:
        raise _bad(index, "key must be bin or nil")
    if headers is not None:
        headers = _headers(index, headers)
    if partition is not None and (type(partition) is not int or partition < 0):
        raise _bad(index, "partition must be a non-negative integer or nil")
    if timestamp is not None and type(timestamp) is not int:
        raise _bad(index, "timestamp must be an integer (ms since the epoch) or nil")
    # Plain tuples in Message's field order: a NamedTuple per message costs on the hot
    # path, and they compare equal to Message.
    return (id_, stream, value, key, headers, partition, timestamp)


_PAD = [(None,) * (7 - n) if n <= 7 else () for n in range(8)]


def _headers(index: int, headers: Any) -> list[tuple[str, bytes | None]]:
    if type(headers) is not list:
        raise _bad(index, "headers must be an array of [str, bin] pairs")
    out = []
    for pair in headers:
        if (
            type(pair) is not list
            or len(pair) != 2
            or type(pair[0]) is not str
            or (pair[1] is not None and type(pair[1]) is not bytes)
        ):
            raise _bad(index, "headers must be an array of [str, bin] pairs")
        out.append((pair[0], pair[1]))
    return out


class Report(NamedTuple):
    """A decoded delivery report: ``code`` 0 with topic/partition/offset/timestamp, or an error
    code with ``message``."""

    id: int
    code: int
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    timestamp: int | None = None
    message: str | None = None


def parse_reports(item: Any) -> list[Report]:
    """Decode one report item, a single or (version 2) a group report, into Reports."""
    if type(item) is list and len(item) in (3, 6) and type(item[0]) is list:
        ids, ts = item[0], item[5] if len(item) == 6 else None
        if (
            not all(type(i) is int for i in ids)
            or (len(item) == 6) != (item[1] == 0)
            or (type(ts) is list and len(ts) != len(ids))
        ):
            raise WireError(ErrorCode.MALFORMED_FRAME, f"bad group report {item!r}")
        return [parse_report(one) for one in expand_report(item)]
    return [parse_report(item)]


def parse_report(item: Any) -> Report:
    """Decode a single-message report."""
    if type(item) is not list or len(item) < 3 or type(item[0]) is not int:
        raise WireError(ErrorCode.MALFORMED_FRAME, f"bad report {item!r}")
    if item[1] == 0:
        if len(item) != 6:
            raise WireError(ErrorCode.MALFORMED_FRAME, f"bad delivery report {item!r}")
        return Report(item[0], 0, item[2], item[3], item[4], item[5])
    return Report(item[0], item[1], message=str(item[2]))
