"""Memory and connection bounds against a real broker process: queued.max.request.bytes
(partial requests cannot take the memory), max.connections.per.ip, connections.max.idle.ms."""

from __future__ import annotations

import socket
import struct

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for

from .test_api_versions import metadata
from .test_hostile import rss_kib
from .wire import WireClient

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    options = {"queued.max.request.bytes": 16 * MIB, "max.connections.per.ip": 12}
    with BrokerProcess(tmp_path_factory.mktemp("limits"), options) as broker:
        yield broker


def client_from(broker, source_ip: str) -> WireClient:
    client = WireClient.__new__(WireClient)
    client.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10,
                                           source_address=(source_ip, 0))
    client._correlation = 0
    return client


def test_one_connection_over_max_connections_per_ip_is_closed(bounded):
    # from an address of its own (127.0.0.2): the other tests' connections do not count
    clients = [client_from(bounded, "127.0.0.2") for _ in range(12)]
    try:
        for client in clients:  # each is served
            metadata(client, ["limits"])
        with client_from(bounded, "127.0.0.2") as extra:
            assert extra.is_closed_by_peer()
    finally:
        for client in clients:
            client.close()
    assert "max.connections.per.ip=12 reached for 127.0.0.2" in bounded.log_text()


def test_partial_requests_hold_at_most_queued_max_request_bytes(bounded):
    with WireClient(bounded.bootstrap) as bystander:
        metadata(bystander, ["limits"])
        before = rss_kib(bounded.pid)
        attackers = []
        try:
            for _ in range(8):  # each sends 8 MiB of a 9 MiB request: 64 MiB unbounded
                attacker = socket.create_connection(("127.0.0.1", bounded.port), timeout=0.5)
                attackers.append(attacker)
                try:
                    attacker.sendall(struct.pack(">i", 9 * MIB) + b"\0" * (8 * MIB))
                except TimeoutError:
                    pass  # the broker stopped reading from this one: the point
            metadata(bystander, ["limits"])  # small requests are still served
            grown_mib = (rss_kib(bounded.pid) - before) / 1024
            # two reservations fit 16 MiB; the others wait in the kernel's socket buffers
            assert grown_mib < 32, f"broker grew by {grown_mib:.0f} MiB"
        finally:
            for attacker in attackers:
                attacker.close()
        metadata(bystander, ["limits"])


def test_a_silent_connection_is_closed_after_connections_max_idle_ms(tmp_path):
    with BrokerProcess(tmp_path, {"connections.max.idle.ms": 300}) as broker:
        with WireClient(broker.bootstrap, timeout=30) as silent:
            assert silent.is_closed_by_peer()
        # the broker logs the reason as it closes: on a loaded machine the line may reach
        # its log file a moment after the client saw the close
        wanted = "nothing received for 300 ms (connections.max.idle.ms)"
        wait_for(lambda: wanted in broker.log_text(), "the reason in the broker's log", timeout=10,
                 log=broker.log_text)
