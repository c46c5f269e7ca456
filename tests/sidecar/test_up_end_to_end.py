"""`databus up` as users run it (a real process with its built-in broker child): 100 000
messages from the SDK, none lost, per-key order, verified by consuming with confluent-kafka;
then a clean Ctrl-C.  Also: still serving after idling (with `databus sidecar` and `databus
broker` too), and `databus up` with no configuration at all."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

import pytest
import yaml

from databus import Client, SidecarUnavailableError
from tests.broker.clients import Msg, confluent_consume, confluent_produce
from tests.helpers.broker import BrokerProcess
from tests.helpers.processes import (
    UP,
    kafka_listener,
    start_databus,
    start_up,
    stop,
    wait_for_log,
)
from tests.helpers.wait import wait_for

from .harness import consume_all

N = 100_000
KEYS = 64


def up_with_config(tmp, sock_dir):
    config = tmp / "sidecar.yaml"
    config.write_text(yaml.safe_dump({
        "sidecar": {"socket": os.path.join(sock_dir, "up.sock"), "metrics_listen": None},
        "broker": {"data_dir": "data", "listen": "127.0.0.1:0",
                   "options": {"num.partitions": 4}},
        "producer": {"linger.ms": 5, "compression.type": "lz4"},
        "streams": {"events": {"topic": "e2e-events"}},
        "console": {"listen": "127.0.0.1:0"},
    }))
    process, text = start_up(["-c", str(config)], tmp, tmp / "up.log", ready=("Kafka listener",))
    return process, kafka_listener(text)


def test_up_100k_messages_none_lost_per_key_order(tmp_path, sock_dir):
    process, bootstrap = up_with_config(tmp_path, sock_dir)
    try:
        with Client(os.path.join(sock_dir, "up.sock")) as client:
            futures = []
            for i in range(N):
                key = b"key-%d" % (i % KEYS)
                # The value carries the key's own sequence number.
                futures.append(client.send("events", b"%d" % (i // KEYS), key=key))
            client.flush(120)
            deliveries = [f.result(0) for f in futures]
        assert {d.topic for d in deliveries} == {"e2e-events"}
        assert len({(d.partition, d.offset) for d in deliveries}) == N

        records = consume_all(bootstrap, "e2e-events", N, timeout=120)
        assert len(records) == N
        assert {(p, o) for p, o, *_ in records} == {(d.partition, d.offset) for d in deliveries}
        last_seq: dict[bytes, int] = {}
        for _, _, key, value, _ in sorted(records, key=lambda r: (r[0], r[1])):
            seq = int(value)
            assert seq == last_seq.get(key, -1) + 1, key  # gap-free, in order, per key
            last_seq[key] = seq
        assert len(last_seq) == KEYS

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        text = (tmp_path / "up.log").read_text()
        assert "broker stopped cleanly" in text and "databus stopped" in text
        assert not os.path.exists(os.path.join(sock_dir, "up.sock"))
    finally:
        stop(process)


def log_size(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (sum of the partitions' high watermarks: nothing is deleted)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "size",
                                         "log_level": 0})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p),
                                           timeout=10)[1]
            for p in partitions
        )
    finally:
        consumer.close()


def test_a_client_outlives_kill_9_of_databus_up(tmp_path, sock_dir):
    """kill -9 of `databus up` while a client sends: every pending message is answered (none
    hangs), every one reported delivered is in the log after the restart, and the same
    Client sends again once `databus up` is back on the same data directory."""
    process, _ = up_with_config(tmp_path, sock_dir)
    client = Client(os.path.join(sock_dir, "up.sock"))
    try:
        for i in range(2000):
            client.send("events", b"warm-%d" % i)
        client.flush(60)
        futures = [client.send("events", b"%d" % i, key=b"k%d" % (i % 8)) for i in range(20000)]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        outcomes = [f.exception(30) for f in futures]  # raises TimeoutError if one hangs
        delivered = [f.result(0) for f, exc in zip(futures, outcomes) if exc is None]
        assert all(isinstance(exc, SidecarUnavailableError)
                   for exc in outcomes if exc is not None), {type(e) for e in outcomes}

        time.sleep(1)  # the broker child stops on its parent's death (its lifeline pipe)
        process, bootstrap = up_with_config(tmp_path, sock_dir)

        def send_after():
            try:
                return client.send("events", b"after").result(30)
            except SidecarUnavailableError:
                return None

        after = wait_for(send_after, "the client reconnecting", timeout=30)
        assert client.reconnects >= 1
        # Messages whose outcome was unknown (failed by the kill) may be in the log too:
        # read all of it, up to the partitions' high watermarks.
        records = consume_all(bootstrap, "e2e-events", log_size(bootstrap, "e2e-events"),
                              timeout=60)
        assert len(records) >= 2000 + len(delivered) + 1
        stored = {(p, o): v for p, o, _, v, _ in records}
        for d in delivered:
            assert (d.partition, d.offset) in stored  # nothing acknowledged is lost
        assert stored[(after.partition, after.offset)] == b"after"
    finally:
        client.close(timeout=5)
        stop(process)


# Longer than trio's idle worker-thread timeout (10 s): the broker child of `databus up` once
# died then, its PR_SET_PDEATHSIG tied to the worker thread that forked it.
IDLE_SECONDS = 15


@pytest.mark.slow
def test_up_serves_after_idling_and_its_broker_dies_with_it(tmp_path, sock_dir):
    process, bootstrap = up_with_config(tmp_path, sock_dir)
    try:
        time.sleep(IDLE_SECONDS)
        assert process.poll() is None, (tmp_path / "up.log").read_text()
        with Client(os.path.join(sock_dir, "up.sock")) as client:
            delivery = client.send("events", b"after idling", key=b"k").result(30)
        assert delivery.topic == "e2e-events"
        (record,) = consume_all(bootstrap, "e2e-events", 1, timeout=60)
        assert record[2:4] == (b"k", b"after idling")
        # The web console (console.listen) serves the same cluster (tests/console: in a browser).
        console = re.search(r"console\s+(http://\S+)", (tmp_path / "up.log").read_text())
        assert console, (tmp_path / "up.log").read_text()
        with urllib.request.urlopen(f"{console.group(1)}/topics/e2e-events", timeout=30) as page:
            html = page.read().decode()
        assert "Topic e2e-events" in html
        assert html.count('<tr><td class="n">') == 4  # a row per partition (num.partitions)

        # kill -9 of `databus up`: its broker sees the lifeline pipe close and stops cleanly.
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        wait_for((tmp_path / "data" / ".kafka_cleanshutdown").exists,
                 "the orphaned broker wrote its clean-shutdown marker")
    finally:
        stop(process)


@pytest.mark.slow
def test_sidecar_and_broker_serve_after_idling(tmp_path, sock_dir):
    """`databus broker` and `databus sidecar` in front of it, both idle past 10 s, then: a
    message through the sidecar arrives, and a Kafka client produces and fetches directly."""
    with BrokerProcess(tmp_path / "broker", {"num.partitions": 1}) as broker:
        config = tmp_path / "sidecar.yaml"
        config.write_text(yaml.safe_dump({
            "sidecar": {"socket": os.path.join(sock_dir, "s.sock"), "metrics_listen": None},
            "clusters": {"main": {"bootstrap.servers": broker.bootstrap}},
            "default_route": {"topic": "{stream}"},
        }))
        log = tmp_path / "sidecar.log"
        process = start_databus(["sidecar", "-c", str(config)], tmp_path, log)
        try:
            wait_for_log(process, log, UP, "databus sidecar started")
            time.sleep(IDLE_SECONDS)
            assert process.poll() is None, log.read_text()
            assert broker.alive(), broker.log_text()
            with Client(os.path.join(sock_dir, "s.sock")) as client:
                delivery = client.send("idle-sidecar", b"via the sidecar").result(30)
            assert (delivery.topic, delivery.offset) == ("idle-sidecar", 0)
            (record,) = consume_all(broker.bootstrap, "idle-sidecar", 1, timeout=60)
            assert record[3] == b"via the sidecar"

            confluent_produce(broker.bootstrap, "idle-direct", [Msg(b"k", b"direct")])
            (got,) = confluent_consume(broker.bootstrap, "idle-direct", 1)
            assert (got.key, got.value) == (b"k", b"direct")
        finally:
            stop(process)


def test_up_without_any_config_routes_every_stream_to_its_own_topic(tmp_path, sock_dir):
    """No -c and no ./sidecar.yaml: the built-in default sends any stream to the topic of
    the same name (a file without `default_route:` refuses unlisted streams instead)."""
    sock = os.path.join(sock_dir, "bare.sock")
    process, text = start_up(["--socket", sock, "--metrics-listen", "127.0.0.1:0", "--data-dir",
                              "data", "--kafka-listen", "127.0.0.1:0"], tmp_path, tmp_path / "up.log")
    try:
        assert "* → {stream}" in text
        bootstrap = kafka_listener(text)
        with Client(sock) as client:
            deliveries = [client.send(name, name.encode()).result(30)
                          for name in ("anything", "page-views")]
        assert [d.topic for d in deliveries] == ["anything", "page-views"]
        (record,) = consume_all(bootstrap, "page-views", 1, timeout=60)
        assert record[3] == b"page-views"
        # SIGHUP reloads a file; without one it is said to have nothing to reload, and
        # never kills the process.
        process.send_signal(signal.SIGHUP)
        wait_for_log(process, tmp_path / "up.log", "SIGHUP: no configuration file",
                     "the SIGHUP logged")
        with Client(sock) as client:
            assert client.send("after-hup", b"x").result(30).topic == "after-hup"
        process.terminate()
        assert process.wait(timeout=30) == 0
    finally:
        stop(process)
