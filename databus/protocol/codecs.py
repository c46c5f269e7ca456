"""The four Kafka compression codecs of RecordBatch v2 (attributes bits 0-2), on cramjam.

This module owns the exact byte formats Kafka clients exchange, which are not always the
defaults of the compression libraries:

- gzip (1): a plain gzip member (RFC 1952), as Java's GZIPOutputStream writes.
- snappy (2): Java's SnappyOutputStream ("xerial") framing: a 16-byte header
  (0x82 "SNAPPY" 0x00, version 1, compatible 1, big-endian int32s) then blocks of
  [big-endian int32 length][raw snappy block], each block compressing up to 32 KiB.
  librdkafka and other clients may send one raw snappy block instead, and a few send the
  official snappy framing format; decompress sniffs the magic and accepts all three.
- lz4 (3): the LZ4 frame format with independent blocks (Java's KafkaLZ4BlockInputStream
  refuses linked blocks: "Dependent block stream is unsupported") and no content checksum.
- zstd (4): zstd frames; librdkafka's streaming compressor omits the content size, so
  decompress must not rely on it.

Defaults follow Kafka's: gzip level 6 (Deflater's default), zstd level 3
(compression.zstd.level).  lz4 uses the fast compressor (librdkafka's default; Kafka >= 3.8
defaults Java producers to the slower high-compression level 9).
"""

from __future__ import annotations

import struct

import cramjam

__all__ = [
    "CODEC_BY_NAME",
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NAMES",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "XERIAL_HEADER",
    "CodecError",
    "UnsupportedCodecError",
    "compress",
    "decompress",
]

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_BY_NAME = {v: k for k, v in CODEC_NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"

GZIP_DEFAULT_LEVEL = 6
# LZ4F level 0 = the fast compressor; cramjam's own default (4) is LZ4-HC, about 4x slower.
LZ4_DEFAULT_LEVEL = 0
ZSTD_DEFAULT_LEVEL = 3

_BE_I32 = struct.Struct(">i")


class CodecError(ValueError):
    """Data that its codec cannot decompress, or a codec that cannot run."""


class UnsupportedCodecError(CodecError):
    """A codec id other than 0-4 (Kafka's UNSUPPORTED_COMPRESSION_TYPE)."""


def _xerial_compress(data) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        parts.append(_BE_I32.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _xerial_decompress(data) -> bytes:
    view = memoryview(data)
    # The version/compat fields are ignored: some producers write them little-endian, and
    # only one blocking scheme exists.
    pos = len(XERIAL_HEADER)
    end = len(view)
    parts = []
    while pos < end:
        if end - pos < 4:
            raise CodecError(f"xerial snappy stream ends inside a block length at byte {pos}")
        (length,) = _BE_I32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CodecError(
                f"xerial snappy block at byte {pos - 4} claims {length} bytes, {end - pos} remain"
            )
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)


def _snappy_decompress(data) -> bytes:
    head = bytes(memoryview(data)[:10])
    if head[:8] == XERIAL_MAGIC and len(data) >= len(XERIAL_HEADER):
        return _xerial_decompress(data)
    if head == SNAPPY_FRAMED_MAGIC:
        return bytes(cramjam.snappy.decompress(data))
    return bytes(cramjam.snappy.decompress_raw(data))


def _lz4_compress(data, level: int | None) -> bytes:
    compressor = cramjam.lz4.Compressor(
        level=LZ4_DEFAULT_LEVEL if level is None else level,
        content_checksum=False,
        block_linked=False,
    )
    compressor.compress(data)
    return bytes(compressor.finish())


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress ``data`` (any bytes-like) the way Kafka's clients do for ``codec``.

    ``level`` is the codec's own level (None = Kafka's default for it).  CODEC_NONE returns
    the data unchanged (as bytes).
    """
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_LZ4:
        return _lz4_compress(data, level)
    if codec == CODEC_ZSTD:
        zstd_level = ZSTD_DEFAULT_LEVEL if level is None else level
        return bytes(cramjam.zstd.compress(data, level=zstd_level))
    if codec == CODEC_SNAPPY:
        return _xerial_compress(data)
    if codec == CODEC_GZIP:
        gzip_level = GZIP_DEFAULT_LEVEL if level is None else level
        return bytes(cramjam.gzip.compress(data, level=gzip_level))
    raise UnsupportedCodecError(f"unknown compression codec id {codec} (Kafka knows 0-4)")


class DecompressedTooLargeError(CodecError):
    """A payload that decompresses to more than the caller's bound (a decompression bomb:
    a few tens of KB of zstd can hold a 1 GiB record)."""


_BUFFER_TOO_SMALL = "failed to write whole buffer"  # cramjam's words for "output is full"
_FIRST_GUESS_RATIO = 8  # most batches decompress to less than 8x: one attempt


def decompress(codec: int, data, max_size: int | None = None) -> bytes:
    """Inverse of compress; also accepts the other encodings real clients send.

    ``max_size``: the most bytes the payload may decompress to; beyond it
    DecompressedTooLargeError, with never more than about ``max_size`` bytes allocated
    (zstd, lz4 and gzip decompress into a bounded buffer; snappy's output is at most ~21x
    its input, checked after).  Raises CodecError (or UnsupportedCodecError) naming the
    codec when ``data`` is not valid.
    """
    if codec == CODEC_NONE:
        return bytes(data)
    if max_size is not None and codec in (CODEC_ZSTD, CODEC_LZ4, CODEC_GZIP):
        return _decompress_bounded(codec, data, max_size)
    out = _decompress(codec, data)
    if max_size is not None and len(out) > max_size:
        raise DecompressedTooLargeError(
            f"{CODEC_NAMES[codec]} data decompresses to {len(out)} bytes, over the "
            f"limit of {max_size}")
    return out


def _decompress_bounded(codec: int, data, max_size: int) -> bytes:
    module = {CODEC_ZSTD: cramjam.zstd, CODEC_LZ4: cramjam.lz4, CODEC_GZIP: cramjam.gzip}[codec]
    size = min(max_size, max(len(data) * _FIRST_GUESS_RATIO, 1 << 16))
    while True:
        out = bytearray(size + 1)  # one spare byte: a full buffer means "maybe more"
        try:
            n = module.decompress_into(data, out)
        except Exception as exc:
            if _BUFFER_TOO_SMALL not in str(exc):
                raise CodecError(f"invalid {CODEC_NAMES[codec]} data: {exc}") from exc
            n = len(out)
        if n <= size:
            del out[n:]
            return bytes(out)
        if size >= max_size:
            raise DecompressedTooLargeError(
                f"{CODEC_NAMES[codec]} data decompresses to more than the limit of "
                f"{max_size} bytes")
        size = min(size * 4, max_size)


def _decompress(codec: int, data) -> bytes:
    try:
        if codec == CODEC_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CODEC_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
        if codec == CODEC_SNAPPY:
            return _snappy_decompress(data)
        if codec == CODEC_GZIP:
            return bytes(cramjam.gzip.decompress(data))
    except CodecError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError, or ValueError/OSError
        raise CodecError(f"invalid {CODEC_NAMES[codec]} data: {exc}") from exc
    raise UnsupportedCodecError(f"unknown compression codec id {codec} (Kafka knows 0-4)")
