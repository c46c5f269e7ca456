"""Random request bodies for every API key and version the broker answers: each is answered
or its connection closed, with one WARNING naming the peer, API key and version; never a
traceback, never a dead broker.  Hypothesis picks the version and body, a few per key (the
examples that matter most are pinned with ``@example``)."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from databus.broker.handlers import handler_table
from databus.protocol.framing import is_flexible

from .test_hostile import still_serving
from .wire import WireClient

TABLE = handler_table()


def request_frame(api_key: int, version: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, 99, 4) + b"fuzz"
    if is_flexible(api_key, version):
        head += b"\0"  # no tagged fields in the header
    return struct.pack(">i", len(head) + len(body)) + head + body


def exchange(bootstrap: str, frame: bytes) -> None:
    """Send one request; read until the broker answers or closes (never hangs)."""
    with WireClient(bootstrap, timeout=10) as client:
        client.send_raw(frame)
        client.sock.shutdown(socket.SHUT_WR)
        try:
            while client.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass


@pytest.fixture(scope="module")
def bystander(broker):
    with WireClient(broker.bootstrap) as client:
        yield client


@pytest.mark.parametrize("api_key", sorted(TABLE))
def test_fuzzed_requests_get_an_answer_or_a_close_never_a_traceback(api_key, broker, bystander):
    registration = TABLE[api_key]
    versions = st.integers(registration.min_version, registration.max_version)

    @settings(max_examples=4, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(version=versions, body=st.binary(max_size=120))
    # every array or string length near 2**32 (compact) or 2**31 (legacy): kio's native
    # reader would allocate that much before reading and abort the process
    @example(version=registration.max_version, body=b"\xff\xff\xff\xff\x0f" * 8)
    @example(version=registration.min_version, body=b"\x7f\xff\xff\xff" * 8)
    @example(version=registration.max_version, body=b"")
    def fuzz(version: int, body: bytes) -> None:
        exchange(broker.bootstrap, request_frame(api_key, version, body))

    fuzz()
    assert broker.alive()
    still_serving(bystander)
    log = broker.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
