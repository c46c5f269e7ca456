"""Swimlanes end to end: a real broker process, a sidecar with `lanes:`, apps sending
through the SDK, and LaneConsumers (databus.lanes) reading.  Each test has its own registry
topic and topics, so they share the broker of tests/lanes."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import trio

import databus
from databus.client import Admin
from databus.config import parse_config
from databus.lanes import LaneConsumer, model
from databus.lanes.registry import RegistryWriter, ensure_registry_topic, now_ms, read_registry
from tests.helpers.wait import wait_until
from tests.sidecar.harness import consume_all, running_sidecar, sidecar_config

DEADLINE = 30.0  # generous: how long a test waits for something that must happen


async def create_lane(bootstrap, registry, name, ttl_ms=3_600_000):
    async with Admin(bootstrap) as admin:
        await ensure_registry_topic(admin, registry)
    now = now_ms()
    async with RegistryWriter(bootstrap, registry) as writer:
        await writer.put(model.lane_key(name),
                         model.Lane(name, "test", now, ttl_ms, now + ttl_ms))


def lanes_sidecar(sock_dir, bootstrap, registry, **lanes):
    return sidecar_config(sock_dir, clusters={"main": {"bootstrap.servers": bootstrap}},
                          default_route={"topic": "{stream}"},
                          lanes={"registry.topic": registry, **lanes})


async def send(sidecar, stream, value, lane=None):
    """Send through the SDK (a real socket) and wait for the delivery."""
    def go():
        with databus.Client(sidecar.addresses.socket) as client:
            return client.send(stream, value, lane=lane).result(30)

    return await trio.to_thread.run_sync(go)


async def values(consumer, wanted, extra_wait=0.3):
    """Values read by ``consumer`` until every one of ``wanted`` arrived (then a short
    while longer, so that a value that should not arrive has had its chance)."""
    seen = []
    with trio.move_on_after(DEADLINE):
        while not set(wanted) <= set(seen):
            seen += [r.value for r in await consumer.poll(0.5)]
    with trio.move_on_after(extra_wait):
        while True:
            seen += [r.value for r in await consumer.poll(0.1)]
    return seen


def consumer_config(registry, group, **lane_settings):
    return {"group.id": group, "auto.offset.reset": "earliest", "lanes.registry.topic": registry,
            "lanes.check.interval.ms": 200, "lane.heartbeat.interval.ms": 200, **lane_settings}


async def test_each_lane_and_the_main_lane_see_only_their_traffic(lane_broker, sock_dir):
    bootstrap, registry = lane_broker.bootstrap, "lanes-t1"
    await create_lane(bootstrap, registry, "a")
    await create_lane(bootstrap, registry, "b")
    async with running_sidecar(lanes_sidecar(sock_dir, bootstrap, registry)) as sidecar:
        assert (await send(sidecar, "t1", b"m1")).topic == "t1"
        assert (await send(sidecar, "t1", b"a1", lane="a")).topic == "t1.lane.a"
        assert (await send(sidecar, "t1", b"b1", lane="b")).topic == "t1.lane.b"

        async def from_asyncio():
            async with databus.AsyncClient(sidecar.addresses.socket) as client:
                return await client.send_and_wait("t1", b"a2", lane="a")

        delivery = await trio.to_thread.run_sync(lambda: asyncio.run(from_asyncio()))
        assert delivery.topic == "t1.lane.a"
        metrics = sidecar.metrics.render().decode()
    assert 'databus_sidecar_lane_messages_total{lane="a",outcome="routed",stream="t1"} 2.0' \
        in metrics
    async with LaneConsumer(bootstrap, ["t1"], consumer_config(registry, "t1-main")) as main, \
            LaneConsumer(bootstrap, ["t1"], consumer_config(registry, "t1-a", lane="a")) as a, \
            LaneConsumer(bootstrap, "t1", consumer_config(
                registry, "t1-b", lane="b", **{"lane.consume.main": "true"})) as b:
        assert sorted(await values(main, [b"m1"])) == [b"m1"]
        assert sorted(await values(a, [b"a1", b"a2"])) == [b"a1", b"a2"]
        assert sorted(await values(b, [b"b1", b"m1"])) == [b"b1", b"m1"]
        # liveness is announced through the registry
        state = await read_registry(bootstrap, registry)
        assert {c.lane for c in state.live_consumers("a", now_ms())} == {"a"}
    state = await read_registry(bootstrap, registry)
    assert state.consumers == {}  # closed consumers leave tombstones


async def test_main_consumers_take_orphan_lanes_until_a_lane_consumer_runs(
        lane_broker, sock_dir):
    bootstrap, registry = lane_broker.bootstrap, "lanes-t2"
    await create_lane(bootstrap, registry, "c")
    main_config = consumer_config(registry, "t2-main", **{"main.consume.orphans": True})
    async with running_sidecar(lanes_sidecar(sock_dir, bootstrap, registry)) as sidecar:
        await send(sidecar, "t2", b"m1")
        await send(sidecar, "t2", b"c1", lane="c")
        async with LaneConsumer(bootstrap, ["t2"], main_config) as main:
            # lane c has no consumer: the main lane takes its messages
            assert "t2.lane.c" in main.subscription()
            assert sorted(await values(main, [b"m1", b"c1"], 0)) == [b"c1", b"m1"]
            async with LaneConsumer(bootstrap, ["t2"],
                                    consumer_config(registry, "t2-c", lane="c")) as lane_c:
                await wait_until(lambda: "t2.lane.c" not in main.subscription(),
                                 "the main consumer gives lane c back", timeout=DEADLINE)
                await send(sidecar, "t2", b"c2", lane="c")
                await send(sidecar, "t2", b"m2")
                assert b"c2" in await values(lane_c, [b"c2"], 0)
                assert b"c2" not in await values(main, [b"m2"])
            # the lane consumer left: the main lane takes lane c over again
            await wait_until(lambda: "t2.lane.c" in main.subscription(),
                             "the main consumer takes lane c over again", timeout=DEADLINE)


async def test_an_expired_lane_is_gone_and_later_sends_follow_the_policy(
        lane_broker, sock_dir):
    bootstrap, registry = lane_broker.bootstrap, "lanes-t3"
    await create_lane(bootstrap, registry, "short", ttl_ms=1500)
    config = lanes_sidecar(sock_dir, bootstrap, registry, **{"expiry.check.ms": 100})
    async with running_sidecar(config) as sidecar, Admin(bootstrap) as admin:
        assert (await send(sidecar, "t3", b"s1", lane="short")).topic == "t3.lane.short"

        async def gone():
            return ("t3.lane.short" not in await admin.list_topics()
                    and "short" not in (await read_registry(bootstrap, registry)).lanes)

        await wait_until(gone, "the expired lane and its topic are deleted", timeout=DEADLINE)
        delivery = await send(sidecar, "t3", b"s2", lane="short")
        assert delivery.topic == "t3"  # lanes.unknown: main, the header kept
        [(_, _, _, value, headers)] = consume_all(bootstrap, "t3", 1)
        assert value == b"s2" and ("databus-lane", b"short") in headers
        # a reload switches the policy to reject: the app's future fails, naming the lane
        data = config.model_dump(by_alias=True)
        data["lanes"]["unknown"] = "reject"
        assert await sidecar.apply(parse_config(data))
        with pytest.raises(databus.PluginFailedError, match="lane 'short' is not live"):
            await send(sidecar, "t3", b"s3", lane="short")
        metrics = sidecar.metrics.render().decode()
        # a reload that moves the registry replaces the follower (the policy did not)
        from databus_plugins.lanes.service import services

        assert [s.settings.registry_topic for s in services()] == [registry]
        data["lanes"]["registry.topic"] = "lanes-t3-moved"
        assert await sidecar.apply(parse_config(data))
        await send(sidecar, "t3", b"s4")  # the stream's route (default_route) is made again

        await wait_until(
            lambda: [s.settings.registry_topic for s in services()] == ["lanes-t3-moved"],
            "the old registry follower stops", timeout=DEADLINE)
    for outcome in ("routed", "fallback", "rejected"):
        assert (f'databus_sidecar_lane_messages_total{{lane="short",outcome="{outcome}",'
                f'stream="t3"}} 1.0') in metrics
    assert "databus_sidecar_lanes_cleaned_total 1.0" in metrics
    # docs/operations.md lists the lane families too
    documented = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    for family in re.findall(r"^# TYPE (databus_sidecar_lane\S+)", metrics, re.M):
        assert f"`{family}`" in documented or f"`{family}_total`" in documented, family


def test_lane_names_are_checked_where_they_enter():
    with pytest.raises(ValueError, match="invalid lane name"):
        LaneConsumer("127.0.0.1:1", ["t"], {"group.id": "g", "lane": "a.b"})
    with pytest.raises(ValueError, match="main.consume.orphans is for main-lane consumers"):
        LaneConsumer("127.0.0.1:1", ["t"], {"group.id": "g", "lane": "a",
                                             "main.consume.orphans": True})


async def test_the_lane_header_arrives_intact_after_a_mirror_hop(lane_broker, sock_dir, tmp_path):
    """Region A's sidecar routes a lane message and mirrors the lane topic to region B: on B
    the record still says its lane (header), and B's topic name still parses as a lane
    topic.  The registry is not mirrored (each region has its own lanes)."""
    from databus.broker.process import BrokerProcess

    registry = "lanes-t6"
    await create_lane(lane_broker.bootstrap, registry, "x")
    with BrokerProcess(tmp_path / "b") as b:
        config = sidecar_config(
            sock_dir,
            clusters={"A": {"bootstrap.servers": lane_broker.bootstrap},
                      "B": {"bootstrap.servers": b.bootstrap}},
            streams={"t6": {"cluster": "A"}},
            lanes={"registry.topic": registry, "cluster": "A"},
            mirrors=[{"name": "a2b", "source": "A", "target": "B", "topics.regex": r"t6\..*",
                      "consumer": {"metadata.max.age.ms": 500}}])
        async with running_sidecar(config) as sidecar:
            assert (await send(sidecar, "t6", b"x1", lane="x")).topic == "t6.lane.x"
            async with Admin(b.bootstrap) as admin_b:
                async def mirrored():
                    return "A.t6.lane.x" in await admin_b.list_topics()

                await wait_until(mirrored, "the mirror creates A.t6.lane.x on B",
                                 timeout=DEADLINE)
            got = await trio.to_thread.run_sync(consume_all, b.bootstrap, "A.t6.lane.x", 1)
    [(_, _, _, value, headers)] = got
    assert value == b"x1" and ("databus-lane", b"x") in headers
    assert model.parse_lane_topic(model.DEFAULT_TEMPLATE, "A.t6.lane.x") == ("A.t6", "x")
