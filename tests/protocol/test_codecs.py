"""Kafka's codecs: the exact framings Kafka clients exchange, checked against independent
implementations (python-snappy, python-lz4, zstandard, the stdlib's gzip) in both directions."""

import gzip
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.protocol.codecs import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    XERIAL_HEADER,
    CodecError,
    UnsupportedCodecError,
    compress,
    decompress,
)

TEXT = b"".join(
    b"record %d: the quick brown fox jumps over the lazy dog\n" % i for i in range(3000)
)


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from([0, 1, 2, 3, 4]), data=st.binary(max_size=5000) | st.just(TEXT))
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


def test_xerial_snappy_layout_matches_java_snappy_output_stream():
    packed = compress(CODEC_SNAPPY, TEXT)
    assert XERIAL_HEADER == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    assert packed.startswith(XERIAL_HEADER)
    # Blocks of [int32 length][raw snappy] each holding at most 32 KiB of input.
    pos, sizes = len(XERIAL_HEADER), []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        sizes.append(len(snappy.decompress(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert sizes[:-1] == [32 * 1024] * (len(sizes) - 1) and sum(sizes) == len(TEXT)


def test_snappy_decompress_accepts_raw_xerial_and_framed_streams():
    raw = snappy.compress(TEXT)  # one raw block, as librdkafka sends
    assert decompress(CODEC_SNAPPY, raw) == TEXT
    framed = snappy.StreamCompressor().compress(TEXT)  # the official framing format
    assert decompress(CODEC_SNAPPY, framed) == TEXT
    # xerial with little-endian version fields (written by some brokers) still decodes
    swapped = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + compress(CODEC_SNAPPY, TEXT)[16:]
    assert decompress(CODEC_SNAPPY, swapped) == TEXT


def test_lz4_frame_has_independent_blocks_and_no_content_checksum():
    packed = compress(CODEC_LZ4, TEXT)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # version
    assert flg & 0x20, "Java's KafkaLZ4BlockInputStream refuses dependent blocks"
    assert not flg & 0x04, "no content checksum"
    assert (bd >> 4) & 7 == 4  # 64 KiB blocks, as Kafka writes
    assert lz4.frame.decompress(packed) == TEXT


def test_lz4_decompress_accepts_content_size_and_checksums():
    packed = lz4.frame.compress(TEXT, store_size=True, content_checksum=True, block_linked=False)
    assert decompress(CODEC_LZ4, packed) == TEXT


def test_zstd_with_and_without_content_size():
    with_size = zstandard.ZstdCompressor().compress(TEXT)
    streaming = zstandard.ZstdCompressor().compressobj()
    without_size = streaming.compress(TEXT) + streaming.flush()
    assert (
        zstandard.get_frame_parameters(without_size).content_size == zstandard.CONTENTSIZE_UNKNOWN
    )
    assert decompress(CODEC_ZSTD, with_size) == TEXT
    assert decompress(CODEC_ZSTD, without_size) == TEXT
    assert zstandard.ZstdDecompressor().decompress(compress(CODEC_ZSTD, TEXT)) == TEXT


def test_gzip_is_a_standard_gzip_member():
    packed = compress(CODEC_GZIP, TEXT)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == TEXT
    assert decompress(CODEC_GZIP, gzip.compress(TEXT, compresslevel=1)) == TEXT


@pytest.mark.parametrize(
    "codec, name",
    [(CODEC_GZIP, "gzip"), (CODEC_SNAPPY, "snappy"), (CODEC_LZ4, "lz4"), (CODEC_ZSTD, "zstd")],
)
@pytest.mark.parametrize("garbage", [b"definitely not compressed data", b"\xff" * 64])
def test_garbage_raises_codec_error_naming_the_codec(codec, name, garbage):
    with pytest.raises(CodecError, match=f"invalid {name} data"):
        decompress(codec, garbage)


def test_truncated_streams_raise_codec_error():
    for codec in (CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD):
        packed = compress(codec, TEXT)
        with pytest.raises(CodecError):
            decompress(codec, packed[: len(packed) // 2])


def test_unknown_codec():
    with pytest.raises(UnsupportedCodecError, match="codec id 6"):
        compress(6, b"x")
    with pytest.raises(UnsupportedCodecError, match="codec id 7"):
        decompress(7, b"x")


def test_none_is_identity_on_any_buffer():
    assert compress(CODEC_NONE, bytearray(b"ab")) == b"ab"
    assert decompress(CODEC_NONE, memoryview(b"ab")) == b"ab"
