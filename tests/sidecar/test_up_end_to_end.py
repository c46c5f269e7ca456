"""`databus up` as users run it (a real process with its built-in broker child): 100 000
messages from the SDK, none lost, per-key order, verified by consuming with confluent-kafka;
then a clean Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import yaml

from databus import Client, SidecarUnavailableError

from .harness import consume_all

N = 100_000
KEYS = 64


def start_up(tmp, sock_dir):
    config = tmp / "sidecar.yaml"
    config.write_text(yaml.safe_dump({
        "sidecar": {"socket": os.path.join(sock_dir, "up.sock"), "metrics_listen": None},
        "broker": {"data_dir": "data", "listen": "127.0.0.1:0",
                   "options": {"num.partitions": 4}},
        "producer": {"linger.ms": 5, "compression.type": "lz4"},
        "streams": {"events": {"topic": "e2e-events"}},
    }))
    log = open(tmp / "up.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "databus.cli", "up", "-c", str(config)],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = (tmp / "up.log").read_text(errors="replace")
        match = re.search(r"Kafka listener\s+(\S+:\d+)", text)
        if match and "databus is up" in text:
            return process, match.group(1), log
        if process.poll() is not None:
            raise AssertionError(f"databus up exited early:\n{text}")
        time.sleep(0.1)
    process.kill()
    raise AssertionError("databus up did not start within 60s")


def test_up_100k_messages_none_lost_per_key_order(tmp_path, sock_dir):
    process, bootstrap, log = start_up(tmp_path, sock_dir)
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
        if process.poll() is None:
            process.terminate()  # drains, then stops its broker
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()  # the broker child gets SIGTERM through PDEATHSIG
                process.wait()
        log.close()


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


def stop(process, log) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log.close()


def test_a_client_outlives_kill_9_of_databus_up(tmp_path, sock_dir):
    """kill -9 of `databus up` while a client sends: every pending message is answered (none
    hangs), every one reported delivered is in the log after the restart, and the same
    Client sends again once `databus up` is back on the same data directory."""
    process, _, log = start_up(tmp_path, sock_dir)
    client = Client(os.path.join(sock_dir, "up.sock"))
    try:
        for i in range(2000):
            client.send("events", b"warm-%d" % i)
        client.flush(60)
        futures = [client.send("events", b"%d" % i, key=b"k%d" % (i % 8)) for i in range(20000)]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        log.close()
        outcomes = [f.exception(30) for f in futures]  # raises TimeoutError if one hangs
        delivered = [f.result(0) for f, exc in zip(futures, outcomes) if exc is None]
        assert all(isinstance(exc, SidecarUnavailableError)
                   for exc in outcomes if exc is not None), {type(e) for e in outcomes}

        time.sleep(1)  # the broker child stops on its parent's death (PDEATHSIG)
        process, bootstrap, log = start_up(tmp_path, sock_dir)
        deadline = time.monotonic() + 30
        while True:
            try:
                after = client.send("events", b"after").result(30)
                break
            except SidecarUnavailableError:
                assert time.monotonic() < deadline, "the client did not reconnect"
                time.sleep(0.1)
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
        stop(process, log)
