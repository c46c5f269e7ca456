"""A minimal blocking Kafka client for tests: one socket, requests described as dicts.

``RawClient(bootstrap).call(api_key, version, {...})`` builds the kio request of exactly that
version (fields the version lacks are dropped, see databus/protocol/entities.py), sends it and
returns the decoded kio response.  It lets a test speak any version of any API and stop at
any step of a protocol (a group leader that never sends SyncGroup, for instance).
"""

from __future__ import annotations

import itertools
import socket
import struct

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build_request
from databus.protocol.framing import decode_response, encode_request


class RawClient:
    def __init__(self, bootstrap: str, client_id: str = "raw-test", timeout: float = 30.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self._ids = itertools.count(1)

    def call(self, api_key: int, version: int, fields: dict):
        body = build_request(api_key, version, fields)
        correlation_id = next(self._ids)
        self.sock.sendall(encode_request(body, correlation_id, self.client_id))
        size = struct.unpack(">i", self._read(4))[0]
        got_id, response = decode_response(self._read(size), api_key, version)
        assert got_id == correlation_id
        return response

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0 for ``topics`` (no user data)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: ``partitions`` of one topic."""
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


def share_start_offset(bootstrap: str, group: str, topic: str) -> int:
    """The share group's start offset of ``topic``'s partition 0 (DescribeShareGroupOffsets:
    every record below it is settled for good)."""
    with RawClient(bootstrap) as client:
        response = client.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {
            "groups": [{"group_id": group, "topics": [{"topic_name": topic,
                                                       "partitions": [0]}]}]})
    return response.groups[0].topics[0].partitions[0].start_offset
