"""Kafka framing: golden bytes for headers, the ApiVersions header exception, and the
frame splitter fed whole and byte by byte."""

import pytest
from kio.index import load_request_schema, load_response_schema

from databus.protocol.errors import ErrorCode
from databus.protocol.framing import (
    FrameBuffer,
    FramingError,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)


def test_api_versions_v0_request_golden_bytes():
    req = load_request_schema(18, 0)()
    frame = encode_request(req, correlation_id=1, client_id="c")
    # size=11, api_key=18, version=0, correlation_id=1, client_id="c"
    assert frame == bytes.fromhex("0000000b" "0012" "0000" "00000001" "0001" "63")


def test_flexible_request_header_has_tag_buffer_and_legacy_client_id():
    req = load_request_schema(18, 3)(client_software_name="a", client_software_version="1")
    frame = encode_request(req, correlation_id=2, client_id="cl")
    body = frame[4:]
    # header v2: key, version, correlation, int16-length client id, then an empty tag buffer
    assert body[:12] == bytes.fromhex("0012" "0003" "00000002" "0002") + b"cl"
    assert body[12] == 0
    header, decoded = decode_request(body)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 2)
    assert header.client_id == "cl"
    assert decoded == req


def test_api_versions_response_header_never_flexible():
    schema = load_response_schema(18, 3)
    body = schema(
        error_code=ErrorCode.none, api_keys=(), throttle_time=__import__("datetime").timedelta(0),
    )
    frame = encode_response(18, 3, 5, body)
    # correlation id directly followed by the int16 error code: no header tag buffer
    assert frame[4:8] == bytes.fromhex("00000005")
    assert frame[8:10] == b"\0\0"
    cid, decoded = decode_response(frame[4:], 18, 3)
    assert cid == 5 and decoded.error_code == ErrorCode.none


def test_flexible_response_header_has_tag_buffer():
    schema = load_response_schema(3, 12)
    body = schema(
        throttle_time=__import__("datetime").timedelta(0), brokers=(), cluster_id="x",
        controller_id=0, topics=(),
    )
    frame = encode_response(3, 12, 9, body)
    assert frame[4:9] == bytes.fromhex("00000009" "00")
    assert decode_response(frame[4:], 3, 12) == (9, body)


def test_unknown_api_version_is_reported_with_header():
    frame = bytes.fromhex("0012" "0063" "00000007" "ffff")  # ApiVersions v99, null client
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 7


@pytest.mark.parametrize("frame", [b"", b"\x00\x12", bytes.fromhex("0012000000000001" "0009") + b"ab"])
def test_truncated_headers_raise(frame):
    with pytest.raises(FramingError):
        decode_request(frame)


def test_frame_buffer_byte_by_byte():
    req = load_request_schema(3, 4)(topics=None, allow_auto_topic_creation=True)
    frames = [encode_request(req, i, "x") for i in range(3)]
    stream = b"".join(frames)
    fb = FrameBuffer(1 << 20)
    out = []
    for i in range(len(stream)):
        fb.feed(stream[i : i + 1])
        out.extend(fb.frames())
    assert out == [f[4:] for f in frames]
    assert fb.buffered == 0


@pytest.mark.parametrize("prefix", [bytes.fromhex("80000000"), bytes.fromhex("7fffffff")])
def test_frame_buffer_rejects_hostile_sizes_before_buffering(prefix):
    fb = FrameBuffer(100 * 1024 * 1024)
    fb.feed(prefix)
    with pytest.raises(FramingError):
        fb.next_frame()
