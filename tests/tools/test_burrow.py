"""Burrow (LinkedIn's lag checker, 1.2.1 from Debian, still widely run) reads the broker: a
group that committed 400 of 1000 records shows lag 600.

Burrow asks each partition's latest offset with ListOffsets v0 (it builds the request
itself and never negotiates), which Kafka 4.0 dropped; without v0 it sees no offsets and
reports no lag.  It reads the groups' commits from ``__consumer_offsets`` with its own
consumer (sarama, told ``kafka-version = 2.0.0``: Fetch v10).  Burrow 1.2 cannot start
without ZooKeeper (for its own coordination, not Kafka's), so Debian's ZooKeeper runs too.
`make test` installs both (the ``burrow`` target of the Makefile) when it runs as root.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for

BURROW = shutil.which("Burrow") or "/usr/bin/Burrow"
JAVA = shutil.which("java")
ZOOKEEPER_JARS = ["/usr/share/java/zookeeper.jar", "/usr/share/java/log4j-1.2.jar",
                  "/usr/share/java/slf4j-api.jar", "/usr/share/java/slf4j-log4j12.jar"]

pytestmark = pytest.mark.skipif(
    not (Path(BURROW).exists() and JAVA and all(Path(j).exists() for j in ZOOKEEPER_JARS)),
    reason="needs Debian's burrow and zookeeper packages (apt-get install burrow zookeeper; "
           "`make test` installs them as root)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def _started(argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def zookeeper(tmp_path):
    port = _free_port()
    config = tmp_path / "zoo.cfg"
    config.write_text(f"tickTime=2000\ndataDir={tmp_path / 'zk'}\nclientPort={port}\n"
                      "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n")
    process = _started([JAVA, "-Xmx128m", "-cp", ":".join(ZOOKEEPER_JARS),
                        "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
                       tmp_path / "zookeeper.log")

    def listening() -> bool:
        assert process.poll() is None, (tmp_path / "zookeeper.log").read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        wait_for(listening, "ZooKeeper listening", timeout=60)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(process)


def _burrow_config(directory: Path, bootstrap: str, zookeeper: str, http_port: int) -> None:
    directory.mkdir()
    (directory / "burrow.toml").write_text(f"""
[general]
pidfile="{directory / 'burrow.pid'}"
[logging]
level="info"
[zookeeper]
servers=["{zookeeper}"]
timeout=6
root-path="/burrow"
[client-profile.databus]
client-id="burrow-test"
kafka-version="2.0.0"
[cluster.local]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="databus"
topic-refresh=2
offset-refresh=2
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{bootstrap}"]
client-profile="databus"
offsets-topic="__consumer_offsets"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
workers=2
intervals=10
min-distance=1
""")


def test_burrow_shows_the_lag_of_a_group_that_committed_400_of_1000(tmp_path, zookeeper):
    with BrokerProcess(tmp_path / "broker", {"group.initial.rebalance.delay.ms": 0}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(1000):
            producer.produce("burrow-lagged", b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "burrow-group",
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("burrow-lagged", 0, 400)], asynchronous=False)
        consumer.close()

        http_port = _free_port()
        _burrow_config(tmp_path / "burrow", broker.bootstrap, zookeeper, http_port)
        burrow = _started([BURROW, "--config-dir", str(tmp_path / "burrow")],
                          tmp_path / "burrow.log")
        base = f"http://127.0.0.1:{http_port}/v3/kafka/local"

        def lag():
            assert burrow.poll() is None, (tmp_path / "burrow.log").read_text(errors="replace")
            try:
                status = _get(f"{base}/consumer/burrow-group/lag")["status"]
            except OSError:
                return None
            partitions = status.get("partitions") or []
            if not partitions or partitions[0]["end"]["lag"] == 0:
                return None  # Burrow has not read both the commit and the offsets yet
            return status

        try:
            status = wait_for(lag, "Burrow's lag of burrow-group", timeout=90, interval=0.5,
                              log=lambda: (tmp_path / "burrow.log").read_text(errors="replace"))
            assert "burrow-lagged" in _get(f"{base}/topic")["topics"]
            (partition,) = status["partitions"]
            assert (partition["topic"], partition["partition"]) == ("burrow-lagged", 0)
            assert partition["end"]["offset"] == 400
            assert partition["current_lag"] == 600
            assert status["totallag"] == 600
        finally:
            _stop(burrow)
