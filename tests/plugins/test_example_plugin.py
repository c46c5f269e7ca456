"""Plugins on the sidecar's hot path, end to end through the SDK: the installed example
third-party plugin, the built-in field partitioner, and plugins that raise."""

from __future__ import annotations

import json
import zlib

import pytest
import trio

from databus import Client, PluginFailedError, hookimpl
from databus.client.partitioners import murmur2_partition
from databus.protocol.sidecar_wire import ErrorCode
from databus.sidecar.app import Sidecar
from tests.sidecar.harness import running_sidecar, sidecar_config


def config_for(sock_dir, mock_cluster, streams):
    return sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        streams=streams,
    )


async def test_example_plugin_partitions_and_routes_end_to_end(
    example_plugin, sock_dir, mock_cluster, monkeypatch
):
    monkeypatch.setenv("DATABUS_LOAD_PLUGINS", "example")
    config = config_for(sock_dir, mock_cluster, {
        "example.orders": {"topic": "plugin-orders", "partitioner": "by_tenant"},
        "plain": {"topic": "plugin-plain", "partitioner": "by_tenant",
                  "partitioner.config": {"separator": "/"}},
    })
    keys = [b"acme:1", b"acme:2", b"globex:1", b"initech:9"]

    def app(path):
        with Client(path) as client:
            tagged = [client.send("example.orders", b"v", key=k) for k in keys]
            dropped = client.send("example.orders", b"", key=b"acme:3")
            plain = client.send("plain", b"v", key=b"acme/7")
            client.flush(30)
            return [f.result(0) for f in tagged], dropped.result(0), plain.result(0)

    async with running_sidecar(config) as sidecar:
        tagged, dropped, plain = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
    for key, delivery in zip(keys, tagged):
        tenant = key.split(b":")[0]
        assert delivery.partition == zlib.crc32(tenant) % 4  # mock topics have 4 partitions
    assert tagged[0].partition == tagged[1].partition
    assert dropped.dropped and dropped.offset == -1
    assert plain.partition == zlib.crc32(b"acme") % 4 and not plain.dropped

    from tests.sidecar.harness import consume_all

    records = await trio.to_thread.run_sync(consume_all, mock_cluster.bootstrap, "plugin-orders", 4)
    assert len(records) == 4
    assert all(h == [("databus-stream", b"example.orders")] for *_, h in records)


async def test_field_partitioner_end_to_end(sock_dir, mock_cluster):
    config = config_for(sock_dir, mock_cluster, {
        "orders": {"topic": "plugin-field", "partitioner": "field",
                   "partitioner.config": {"field": "customer_id"}},
    })
    customers = [f"c-{i}" for i in range(20)]

    def app(path):
        with Client(path) as client:
            futures = [
                client.send("orders", json.dumps({"customer_id": c, "n": i}).encode())
                for i, c in enumerate(customers)
            ]
            return [f.result(30) for f in futures]

    async with running_sidecar(config) as sidecar:
        deliveries = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
    for customer, delivery in zip(customers, deliveries):
        assert delivery.partition == murmur2_partition(customer.encode(), 4)


class FlakyPlugin:
    """A route that raises for some messages and a partitioner that raises for others."""

    @hookimpl
    def databus_route(self, stream, topic, settings):
        def route(message):
            if message.value == b"route-boom":
                raise RuntimeError("route exploded")
            return message

        return route

    @hookimpl
    def databus_partitioner(self, name, config):
        if name != "flaky":
            return None

        def partition(topic, key, value, n):
            if value == b"partition-boom":
                raise ZeroDivisionError("partitioner exploded")
            return 0

        return partition


async def test_a_raising_plugin_fails_only_its_message(sock_dir, mock_cluster):
    config = config_for(
        sock_dir, mock_cluster, {"s": {"topic": "plugin-flaky", "partitioner": "flaky"}}
    )

    def app(path):
        with Client(path) as client:
            futures = [client.send("s", v) for v in (b"ok-1", b"route-boom", b"partition-boom",
                                                      b"ok-2")]
            outcomes = []
            for f in futures:
                try:
                    outcomes.append(f.result(30))
                except PluginFailedError as exc:
                    outcomes.append(exc)
            return outcomes

    async with running_sidecar(config, extra_plugins=[("flaky", FlakyPlugin())]) as sidecar:
        ok1, route_err, part_err, ok2 = await trio.to_thread.run_sync(
            app, sidecar.addresses.socket
        )
    assert ok1.partition == 0 and ok2.offset == ok1.offset + 1
    assert route_err.code == ErrorCode.PLUGIN_ERROR
    assert "plugin 'flaky' failed in route: RuntimeError: route exploded" in str(route_err)
    assert part_err.code == ErrorCode.PLUGIN_ERROR
    assert "plugin 'flaky' failed in partitioner" in str(part_err)
    assert "partitioner exploded" in str(part_err)


async def test_unknown_partitioner_refuses_to_start_and_is_rejected_on_reload(
    sock_dir, mock_cluster
):
    bad = config_for(sock_dir, mock_cluster, {"s": {"partitioner": "no-such"}})
    with pytest.raises(BaseException) as info:
        await Sidecar(bad).serve()
    assert "unknown partitioner 'no-such'" in repr(info.value)

    good = config_for(sock_dir, mock_cluster, {"s": {"topic": "plugin-reload"}})
    async with running_sidecar(good) as sidecar:
        assert not await sidecar.apply(bad)
        assert sidecar.metrics.reloads_failed == 1
        assert sidecar.table.routes["s"].topic == "plugin-reload"
