"""Kafka's primitive encodings, for the records the broker's coordinators read and write
themselves: ``__consumer_offsets``, ``__transaction_state`` and ``__share_group_state`` keys
and values (kio has no schemas for them).

Classic (non-flexible): big-endian ints, int16-length strings (-1 = null), int32-length
bytes, int32 array counts.  Flexible (the consumer-group records of KIP-848, whose values
are flexible from version 0): unsigned-varint lengths plus one ("compact"; 0 = null),
16-byte uuids and a tagged-field section at the end of each struct.
Decoding errors name what was being read and where.
"""

from __future__ import annotations

import struct
import uuid
from typing import Literal, overload

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BinaryFormatError(ValueError):
    """Bytes that do not follow the expected layout."""



class Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.parts.append(_I16.pack(-1))
            return
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise BinaryFormatError(f"string of {len(data)} bytes exceeds 32767")
        self.parts.append(_I16.pack(len(data)) + data)

    def bytes_(self, v: bytes) -> None:
        self.parts.append(_I32.pack(len(v)) + bytes(v))

    def raw(self, v: bytes) -> None:
        """Bytes as they are, no length (fixed-size fields: a uuid, packed structs)."""
        self.parts.append(bytes(v))

    def i8(self, v: int) -> None:
        self.parts.append(struct.pack(">b", v))

    def uvarint(self, v: int) -> None:
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        self.parts.append(bytes(out))

    def compact_string(self, v: str | None) -> None:
        if v is None:
            self.uvarint(0)
            return
        data = v.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.parts.append(data)

    def compact_count(self, n: int) -> None:
        """The length of a compact array (n + 1)."""
        self.uvarint(n + 1)

    def uuid(self, v: uuid.UUID) -> None:
        self.parts.append(v.bytes)

    def no_tags(self) -> None:
        """An empty tagged-field section (we write no tagged fields)."""
        self.uvarint(0)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise BinaryFormatError(f"{self.what}: truncated at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def raw(self, n: int) -> bytes:
        """The next ``n`` bytes as they are (fixed-size fields)."""
        return self._take(n)

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    @overload
    def string(self, nullable: Literal[False] = ...) -> str: ...
    @overload
    def string(self, nullable: bool) -> str | None: ...

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise BinaryFormatError(f"{self.what}: bad string length {n} at byte {self.pos - 2}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BinaryFormatError(f"{self.what}: string is not UTF-8") from exc

    def bytes_(self) -> bytes:
        n = self.i32()
        if n == -1:
            return b""
        return self._take(n)

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise BinaryFormatError(f"{self.what}: varint too long at byte {self.pos}")

    @overload
    def compact_string(self, nullable: Literal[False] = ...) -> str: ...
    @overload
    def compact_string(self, nullable: bool) -> str | None: ...

    def compact_string(self, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            if nullable:
                return None
            raise BinaryFormatError(f"{self.what}: null string at byte {self.pos}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BinaryFormatError(f"{self.what}: string is not UTF-8") from exc

    def compact_count(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise BinaryFormatError(f"{self.what}: null array at byte {self.pos}")
        return n

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def skip_tags(self) -> None:
        """Skip a tagged-field section (fields of newer versions we do not read)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise BinaryFormatError(
                f"{self.what}: {len(self.data) - self.pos} unexpected trailing bytes"
            )
