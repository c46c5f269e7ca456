"""Kafka's classic (non-flexible) primitive encoding, for the records the coordinator
reads and writes itself: ``__consumer_offsets`` keys and values (kio has no schemas for them).
Big-endian ints, int16-length strings (-1 = null), int32-length bytes, int32 array counts.
Decoding errors name what was being read and where.
"""

from __future__ import annotations

import struct

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

    def done(self) -> None:
        if self.pos != len(self.data):
            raise BinaryFormatError(
                f"{self.what}: {len(self.data) - self.pos} unexpected trailing bytes"
            )
