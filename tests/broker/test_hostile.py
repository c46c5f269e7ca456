"""Hostile input from raw sockets: the broker stays up, memory stays bounded, and a client
connected alongside keeps working after every attack."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from databus.protocol.errors import ErrorCode
from databus.protocol.framing import decode_response
from databus.protocol.records import build_batch

from .test_api_versions import make, metadata, produce
from .wire import WireClient


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def bystander(broker):
    with WireClient(broker.bootstrap) as client:
        metadata(client, ["bystander"])
        yield client


def still_serving(bystander) -> None:
    """The connection opened before the attack answers a Metadata request."""
    (topic,) = metadata(bystander, ["bystander"]).topics
    assert topic.error_code == ErrorCode.none


def header(api_key: int, version: int, correlation: int) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation, 1) + b"x"


def framed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_huge_and_negative_size_prefixes_close_only_that_connection(broker, bystander):
    for prefix in (struct.pack(">i", 2**31 - 1), struct.pack(">I", 0x80000000),
                   struct.pack(">i", -1), struct.pack(">i", 100 * 1024 * 1024 + 1)):
        with WireClient(broker.bootstrap) as attacker:
            attacker.send_raw(prefix + b"\0" * 64)
            assert attacker.is_closed_by_peer()
        still_serving(bystander)
    assert "exceeds the limit" in broker.log_text()
    assert "negative frame size" in broker.log_text()


def test_random_bytes_never_hurt_the_broker(broker, bystander):
    rng = random.Random(1234)
    for i in range(40):
        with WireClient(broker.bootstrap, timeout=5) as attacker:
            junk = rng.randbytes(rng.randint(1, 3000))
            if i % 2:  # a plausible size prefix in front of garbage
                junk = struct.pack(">i", len(junk)) + junk
            attacker.send_raw(junk)
            attacker.sock.shutdown(socket.SHUT_WR)
            # whatever it answers, the broker ends the exchange: EOF, never a hang
            try:
                while attacker.sock.recv(65536):
                    pass
            except ConnectionResetError:
                pass
    still_serving(bystander)


def test_truncated_frames_are_dropped_with_the_connection(broker, bystander):
    request = make(18, 3, client_software_name="t", client_software_version="1")
    from databus.protocol.framing import encode_request

    frame = encode_request(request, 7, "trunc")
    for cut in (2, 4, 6, len(frame) - 1):
        with WireClient(broker.bootstrap, timeout=5) as attacker:
            attacker.send_raw(frame[:cut])
            attacker.sock.shutdown(socket.SHUT_WR)
            assert attacker.sock.recv(100) == b""  # nothing to answer, connection closed
    still_serving(bystander)


def test_unknown_api_key_and_version_get_unsupported_version(broker, bystander):
    with WireClient(broker.bootstrap) as client:
        # an API key nobody defines: correlation id + UNSUPPORTED_VERSION, connection stays
        client.send_raw(framed(header(32000, 0, 11)))
        correlation, error = struct.unpack(">ih", client.read_frame())
        assert (correlation, error) == (11, ErrorCode.unsupported_version)
        # a known API at a version we do not advertise: kio-decodable error response
        client.send_raw(framed(header(3, 99, 12) + b"\0\0\0\0"))
        correlation, error = struct.unpack(">ih", client.read_frame()[:6])
        assert (correlation, error) == (12, ErrorCode.unsupported_version)
        # ApiVersions at an unknown version: a v0 body with the error and the key list
        client.send_raw(framed(header(18, 99, 13)))
        correlation, response = decode_response(client.read_frame(), 18, 0)
        assert correlation == 13
        assert response.error_code == ErrorCode.unsupported_version
        assert {k.api_key for k in response.api_keys} >= {0, 1, 2, 3, 18}
        # the same connection still works
        assert metadata(client, ["bystander"]).topics[0].error_code == ErrorCode.none
    still_serving(bystander)


def test_corrupt_batch_is_refused_and_nothing_is_appended(broker, bystander):
    with WireClient(broker.bootstrap) as client:
        metadata(client, ["hostile-corrupt"])
        good = build_batch([(b"k", b"v", (), 1)])
        assert produce(client, "hostile-corrupt", good).responses[0] \
            .partition_responses[0].error_code == ErrorCode.none
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # breaks the CRC
        short = good[:40]
        for bad, code in ((bytes(corrupt), ErrorCode.corrupt_message),
                          (short, ErrorCode.corrupt_message),
                          (good + b"\x00" * 5, ErrorCode.corrupt_message)):
            part = produce(client, "hostile-corrupt", bad).responses[0].partition_responses[0]
            assert part.error_code == code
        again = produce(client, "hostile-corrupt", good).responses[0].partition_responses[0]
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 1)
    still_serving(bystander)


def test_memory_stays_bounded_under_oversized_claims(broker, bystander):
    before = rss_kib(broker.pid)
    attackers = []
    try:
        for _ in range(30):  # each claims 99 MiB (allowed) but sends only 1 MiB of it
            client = WireClient(broker.bootstrap)
            client.send_raw(struct.pack(">i", 99 * 1024 * 1024) + b"\0" * (1 << 20))
            attackers.append(client)
        still_serving(bystander)
        grown_mib = (rss_kib(broker.pid) - before) / 1024
        # nothing is allocated for the claimed size: only what actually arrived (~30 MiB)
        assert grown_mib < 120, f"broker grew by {grown_mib:.0f} MiB"
    finally:
        for client in attackers:
            client.close()
    still_serving(bystander)
