"""A Broker is assembled in its constructor and owns everything it consists of, so two
brokers in one process (two data dirs, two ports) share nothing: topics, groups, cluster
ids, handler tables."""

from __future__ import annotations

import queue
import threading
import time
from contextlib import contextmanager

import trio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from databus.broker.broker import Broker
from databus.broker.config import BrokerConfig
from databus.broker.server import Server

from .test_api_versions import make
from .wire import WireClient

DESCRIBE_CLUSTER = 60


@contextmanager
def brokers_in_a_thread(tmp_path, count: int, prepare=lambda servers: None):
    """``count`` in-process brokers with their servers, on one trio thread; yields
    (brokers, bootstrap addresses).  ``prepare`` sees the servers before they listen."""
    started: queue.Queue = queue.Queue()

    async def main():
        brokers = [Broker(BrokerConfig(**{"log.dirs": str(tmp_path / f"data{i}"),
                                          "listeners": "127.0.0.1:0",
                                          "group.initial.rebalance.delay.ms": 0}))
                   for i in range(count)]
        servers = [Server(broker) for broker in brokers]
        prepare(servers)
        async with trio.open_nursery() as nursery:
            addresses = []
            for broker, server in zip(brokers, servers):
                await nursery.start(broker.run)
                listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
                host, port = await nursery.start(server.serve, listeners, "127.0.0.1")
                addresses.append(f"{host}:{port}")
            started.put((brokers, addresses, trio.lowlevel.current_trio_token(),
                         nursery.cancel_scope))

    failure: list[BaseException] = []

    def run():
        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001  (reported to the test below)
            failure.append(exc)
            started.put(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    got = started.get(timeout=60)
    assert got is not None, f"brokers did not start: {failure}"
    brokers, addresses, token, scope = got
    try:
        yield brokers, addresses
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(30)
    assert not failure, failure


def api_keys(bootstrap: str) -> set[int]:
    with WireClient(bootstrap) as client:
        response = client.request(make(18, 3, client_software_name="t",
                                       client_software_version="1"))
    return {k.api_key for k in response.api_keys}


def test_two_brokers_in_one_process_share_nothing(tmp_path):
    tables = []

    def only_first_describes_the_cluster(servers):
        del servers[1].handlers[DESCRIBE_CLUSTER]
        tables.extend(server.handlers for server in servers)

    with brokers_in_a_thread(tmp_path, 2, only_first_describes_the_cluster) as (brokers, addrs):
        first, second = brokers
        assert tables[0] is not tables[1]
        assert first.groups is not second.groups and first.log_manager is not second.log_manager
        assert first.cluster_id != second.cluster_id

        # the handler table is each server's own: ApiVersions answers from it
        assert DESCRIBE_CLUSTER in api_keys(addrs[0])
        assert DESCRIBE_CLUSTER not in api_keys(addrs[1])

        # a topic created on the first is unknown to the second
        admin = [AdminClient({"bootstrap.servers": a}) for a in addrs]
        admin[0].create_topics([NewTopic("only-on-first", 1)])["only-on-first"].result(30)
        assert "only-on-first" in admin[0].list_topics(timeout=30).topics
        assert "only-on-first" not in admin[1].list_topics(timeout=30).topics
        assert (tmp_path / "data0" / "only-on-first-0").is_dir()
        assert not (tmp_path / "data1" / "only-on-first-0").exists()

        # a group joined on the first is unknown to the second
        consumer = Consumer({"bootstrap.servers": addrs[0], "group.id": "g-first",
                             "auto.offset.reset": "earliest"})
        assigned = []
        consumer.subscribe(["only-on-first"], on_assign=lambda c, parts: assigned.extend(parts))
        deadline = time.monotonic() + 60
        while not assigned:
            assert time.monotonic() < deadline, "the consumer never joined"
            consumer.poll(0.2)
        try:
            on_first = admin[0].describe_consumer_groups(["g-first"])["g-first"].result(30)
            assert [m.member_id for m in on_first.members] == [consumer.memberid()]
            on_second = admin[1].describe_consumer_groups(["g-first"])["g-first"].result(30)
            assert on_second.members == []
            assert [g.group_id for g in admin[1].list_consumer_groups().result(30).valid] == []
        finally:
            consumer.close()
