"""Kafka request/response framing on top of kio's schema codecs.

A Kafka frame is ``int32 size`` followed by ``size`` bytes.  Inside, a request starts with a
header (v1: api_key, api_version, correlation_id, client_id; v2 adds tagged fields) and a
response with ``correlation_id`` (v1 adds tagged fields).  Which header version goes with a
message depends on whether that API version is "flexible" — with one exception that bites
every broker author: the ApiVersions *response* header is always v0 (no tagged fields), so a
client that does not know the broker's versions yet can still read it.

The header is parsed by hand (it is tiny and on every request); bodies go through kio.
"""

from __future__ import annotations

import io
import struct
from collections import deque
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_unsigned_varint

from .api_keys import ApiKey
from .bounds import check_lengths

_I32 = struct.Struct(">i")
_REQ_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


class FramingError(ValueError):
    """A frame or header that cannot be decoded; the connection that sent it must be closed."""


class UnsupportedVersion(FramingError):
    """The header decoded, but we have no schema for this api key / version."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"unsupported api key {header.api_key} version {header.api_version}")
        self.header = header


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@cache
def request_schema(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(schema: Any):
    return entity_reader(schema)


@cache
def _writer(schema: Any):
    return entity_writer(schema)


def is_flexible(api_key: int, version: int) -> bool:
    try:
        schema: Any = request_schema(api_key, version)  # a kio class: __flexible__ is its own
        return bool(schema.__flexible__)
    except Exception:
        return False


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, size = read_unsigned_varint(buf, pos)
    pos += size
    for _ in range(count):
        _tag, size = read_unsigned_varint(buf, pos)
        pos += size
        length, size = read_unsigned_varint(buf, pos)
        pos += size + length
    if pos > len(buf):
        raise FramingError("tagged fields run past the end of the frame")
    return pos


def decode_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """Parse the request header at the start of ``frame`` (without the size prefix).

    Returns the header and the position where the body starts.  The header's tagged fields
    (v2) are skipped only when the api version is flexible and known to kio.
    """
    if len(frame) < _REQ_HEAD.size:
        raise FramingError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_len = _REQ_HEAD.unpack_from(frame, 0)
    pos = _REQ_HEAD.size
    client_id = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise FramingError("client_id runs past the end of the frame")
        client_id = frame[pos:end].decode("utf-8", "replace")
        pos = end
    elif client_len != -1:
        raise FramingError(f"invalid client_id length {client_len}")
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if is_flexible(api_key, api_version):
        pos = _skip_tagged_fields(frame, pos)
    return header, pos


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without the size prefix) into (header, kio request).

    Raises UnsupportedVersion when the header is fine but kio has no such schema, and
    FramingError for anything undecodable.
    """
    header, pos = decode_request_header(frame)
    try:
        schema = request_schema(header.api_key, header.api_version)
    except Exception:
        raise UnsupportedVersion(header) from None
    try:
        # before kio: its native reader sizes arrays from their claimed counts, and a
        # failed allocation aborts the process (see bounds.py)
        check_lengths(schema, frame, pos)
        body, size = _reader(schema)(frame, pos)
    except Exception as exc:  # kio raises a variety of errors on garbage
        raise FramingError(
            f"cannot decode api key {header.api_key} v{header.api_version}: {exc}"
        ) from exc
    return header, body


def encode_request(body: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Encode a kio request (its class fixes api key and version) as a size-prefixed frame."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    cid = None if client_id is None else client_id.encode()
    out.write(
        _REQ_HEAD.pack(body.__api_key__, body.__version__, correlation_id, -1 if cid is None else len(cid))
    )
    if cid:
        out.write(cid)
    if body.__flexible__:
        out.write(b"\0")  # no tagged fields in the header
    _writer(type(body))(out, body)  # type: ignore[arg-type]  # a class is hashable
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def response_header_flexible(api_key: int, version: int) -> bool:
    """Whether the response header carries tagged fields (never for ApiVersions)."""
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, version)


def encode_response(
    api_key: int, version: int, correlation_id: int, body: Any
) -> bytes:
    """Encode a kio response body with its header as a size-prefixed frame."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_I32.pack(correlation_id))
    if response_header_flexible(api_key, version):
        out.write(b"\0")
    _writer(type(body))(out, body)  # type: ignore[arg-type]  # a class is hashable
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """Decode a response frame (without the size prefix) to (correlation_id, kio response)."""
    if len(frame) < 4:
        raise FramingError("response shorter than its header")
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = 4
    if response_header_flexible(api_key, version):
        pos = _skip_tagged_fields(frame, pos)
    try:
        body, _ = _reader(response_schema(api_key, version))(frame, pos)
    except Exception as exc:
        raise FramingError(f"cannot decode response to api key {api_key} v{version}: {exc}") from exc
    return correlation_id, body


class FrameBuffer:
    """Sans-I/O splitter of a byte stream into Kafka frames.

    ``feed(data)`` then iterate ``frames()``; the size prefix is checked against
    ``max_frame_bytes`` *before* anything is buffered for the frame, so a hostile 2 GiB
    prefix costs nothing.  Received chunks are kept as they are (a deque plus a read offset)
    and each frame is cut out once: a frame inside one chunk is one slice, a frame spanning
    chunks is one join, so the cost per frame is O(frame size) whatever the chunking.
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of _chunks[0] already consumed
        self._size = 0  # bytes fed and not yet consumed
        self._frame_size: int | None = None  # prefix of the frame being assembled
        self._error: FramingError | None = None

    def feed(self, data: bytes) -> None:
        if data:
            self._chunks.append(bytes(data))
            self._size += len(data)

    def _take(self, n: int) -> bytes:
        """Remove and return the next ``n`` buffered bytes (``n <= self._size``)."""
        first = self._chunks[0]
        offset = self._offset
        if len(first) - offset >= n:
            out = first[offset : offset + n]  # the whole chunk when it is exactly one frame
            offset += n
            if offset == len(first):
                self._chunks.popleft()
                offset = 0
            self._offset = offset
            self._size -= n
            return out
        parts = []
        need = n
        while need:
            first = self._chunks[0]
            available = len(first) - self._offset
            if available <= need:
                parts.append(memoryview(first)[self._offset :])
                self._chunks.popleft()
                self._offset = 0
                need -= available
            else:
                parts.append(memoryview(first)[self._offset : self._offset + need])
                self._offset += need
                need = 0
        self._size -= n
        return b"".join(parts)

    def next_frame(self) -> bytes | None:
        """Return the next complete frame (without its prefix), or None if more bytes are needed.

        Raises FramingError for a negative or oversized size prefix (and keeps raising it:
        the stream cannot be resynchronised).
        """
        if self._error is not None:
            raise self._error
        if self._frame_size is None:
            if self._size < 4:
                return None
            (size,) = _I32.unpack(self._take(4))
            if size < 0:
                self._error = FramingError(f"negative frame size {size}")
            elif size > self.max_frame_bytes:
                self._error = FramingError(
                    f"frame of {size} bytes exceeds the limit of {self.max_frame_bytes} bytes"
                )
            if self._error is not None:
                raise self._error
            self._frame_size = size
        if self._size < self._frame_size:
            return None
        frame = self._take(self._frame_size) if self._frame_size else b""
        self._frame_size = None
        return frame

    def frames(self):
        while (frame := self.next_frame()) is not None:
            yield frame

    @property
    def buffered(self) -> int:
        return self._size + (4 if self._frame_size is not None else 0)

    @property
    def pending_frame_size(self) -> int | None:
        """The size prefix of the frame being received (None between frames): what a
        server reserves before reading the rest of it (queued.max.request.bytes)."""
        return self._frame_size
