"""One broker connection: version negotiation, pipelining, and failure rules."""

from __future__ import annotations

import pytest
import trio

from databus.client import errors
from databus.client.cluster import parse_bootstrap
from databus.client.connection import CLIENT_VERSIONS, BrokerConnection
from databus.protocol.api_keys import ApiKey


async def test_negotiates_versions_and_pipelines_requests(broker):
    host, port = parse_bootstrap(broker.bootstrap)[0]
    async with trio.open_nursery() as nursery:
        conn = BrokerConnection(host, port)
        await conn.connect(nursery)
        for key, version in conn.versions.items():
            lo, hi = CLIENT_VERSIONS[key]
            blo, bhi = conn.broker_versions[key]
            assert version == min(hi, bhi) and version >= max(lo, blo)
        assert conn.versions[ApiKey.PRODUCE] >= 3
        results = []

        async def ask(i):
            response = await conn.request(
                ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False}
            )
            results.append((i, len(response.brokers)))

        async with trio.open_nursery() as requests:
            for i in range(50):
                requests.start_soon(ask, i)
        assert sorted(results) == [(i, 1) for i in range(50)]
        await conn.aclose()
        with pytest.raises(errors.KafkaConnectionError):
            await conn.request(ApiKey.METADATA, {"topics": []})


async def serve_silently(task_status=trio.TASK_STATUS_IGNORED):
    """A TCP peer that accepts and reads but never answers (a frozen broker)."""
    async def handler(stream):
        async with stream:
            while await stream.receive_some(65536):
                pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handler, listeners)


async def test_unanswered_request_times_out_and_closes_the_connection():
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_silently)
        conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=300)
        with pytest.raises(errors.RequestTimedOutError, match="no response to api key 18"):
            await conn.connect(nursery)  # ApiVersions is never answered
        assert conn.closed
        nursery.cancel_scope.cancel()


async def test_refused_connection_is_a_clear_error():
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    async with trio.open_nursery() as nursery:
        conn = BrokerConnection("127.0.0.1", port, node_id=7)
        with pytest.raises(errors.KafkaConnectionError, match=f"broker 7 at 127.0.0.1:{port}"):
            await conn.connect(nursery)


def test_bootstrap_parsing():
    assert parse_bootstrap("a:1, PLAINTEXT://b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    assert parse_bootstrap(":9092") == [("localhost", 9092)]  # as Kafka's clients
    with pytest.raises(errors.ConfigError, match="bootstrap.servers must be HOST:PORT, got 'nohost'"):
        parse_bootstrap("nohost")
    with pytest.raises(errors.ConfigError, match="got 'b:0': port 0 is not in 1..65535"):
        parse_bootstrap("a:1, b:0")
    with pytest.raises(errors.ConfigError, match="empty"):
        parse_bootstrap(" , ")
