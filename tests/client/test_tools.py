"""The console tools as users run them: ``databus produce | consume | topics`` subprocesses
against a real broker."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def databus(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", *args],
        input=stdin, capture_output=True, timeout=timeout, cwd=ROOT, check=False,
    )


def test_topics_create_list_describe_delete(broker, topic):
    b = ["--bootstrap", broker.bootstrap]
    created = databus("topics", "create", *b, "--topic", topic, "--partitions", "3",
                      "--config", "retention.ms=123456")
    assert created.returncode == 0, created.stderr
    assert f"Created topic {topic}." in created.stdout.decode()
    again = databus("topics", "create", *b, "--topic", topic)
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in again.stderr
    listed = databus("topics", "list", *b)
    assert topic in listed.stdout.decode().split()
    described = databus("topics", "describe", *b, "--topic", topic).stdout.decode()
    assert f"Topic: {topic}\t" in described and "PartitionCount: 3" in described
    assert "retention.ms=123456" in described
    assert described.count("\tPartition: ") == 3
    deleted = databus("topics", "delete", *b, "--topic", topic)
    assert deleted.returncode == 0 and topic not in databus("topics", "list", *b).stdout.decode().split()


def test_produce_then_consume_with_keys_and_headers(broker, topic):
    b = ["--bootstrap", broker.bootstrap]
    assert databus("topics", "create", *b, "--topic", topic, "--partitions", "1").returncode == 0
    lines = b"".join(b"k%d:value %d\n" % (i % 3, i) for i in range(50))
    produced = databus("produce", *b, "--topic", topic, "--key-separator", ":",
                       "--header", "source=test", "-X", "linger.ms=1", stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = databus("consume", *b, "--topic", topic, "--from-beginning", "--max-messages", "50",
                       "--print-key", "--print-offset", "--timeout-ms", "10000")
    assert consumed.returncode == 0, consumed.stderr
    out = consumed.stdout.splitlines()
    assert out == [b"Offset:%d\tk%d\tvalue %d" % (i, i % 3, i) for i in range(50)]
    assert b"Processed a total of 50 messages" in consumed.stderr


def test_consume_with_group_commits_and_resumes(broker, topic):
    b = ["--bootstrap", broker.bootstrap]
    assert databus("topics", "create", *b, "--topic", topic, "--partitions", "2").returncode == 0
    assert databus("produce", *b, "--topic", topic, stdin=b"a\nb\nc\nd\n").returncode == 0
    group = ["--group", f"tool-{topic}"]
    first = databus("consume", *b, "--topic", topic, *group, "--from-beginning",
                    "--max-messages", "4", "--print-partition")
    assert sorted(line.split(b"\t")[1] for line in first.stdout.splitlines()) == [b"a", b"b", b"c", b"d"]
    assert databus("produce", *b, "--topic", topic, stdin=b"e\n").returncode == 0
    second = databus("consume", *b, "--topic", topic, *group, "--from-beginning",
                     "--max-messages", "1")
    assert second.stdout == b"e\n"  # resumed after the committed offsets


def test_produce_reports_undeliverable_lines_and_exits_nonzero(broker, topic):
    b = ["--bootstrap", broker.bootstrap]
    bad = databus("produce", *b, "--topic", topic, "--key-separator", "=", stdin=b"k=v\nnosep\n")
    assert bad.returncode == 1
    assert b"line 2 has no key separator" in bad.stderr
    unreachable = databus("produce", "--bootstrap", "127.0.0.1:1", "--topic", topic,
                          "-X", "max.block.ms=300", stdin=b"x\n")
    assert unreachable.returncode == 1 and b"not sent" in unreachable.stderr
    usage = databus("produce", *b, "--topic", topic, "-X", "linger.ms")
    assert usage.returncode == 2 and b"-X expects key=value" in usage.stderr
    unknown = databus("consume", *b, "--topic", topic, "-X", "fetch.min.byte=1")
    assert unknown.returncode == 2 and b"unknown ConsumerConfig key 'fetch.min.byte'" in unknown.stderr


# -- a bootstrap that is not a Kafka broker --------------------------------------------------


@contextlib.contextmanager
def peer(answer: bytes | None):
    """A loopback TCP server: each connection gets ``answer`` after its first bytes (an HTTP
    server's reply to a request it cannot parse), or nothing at all (None: a silent peer)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def handle(conn):
        with conn:
            conn.recv(4096)
            if answer is not None:
                conn.sendall(answer)
                return
            while not stop.is_set() and conn.recv(4096):
                pass

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()


HTTP_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def test_a_non_kafka_bootstrap_is_named_with_what_it_answered():
    with peer(HTTP_400) as address:
        for command in (["topics", "list"], ["groups", "list", "--timeout", "20"]):
            result = databus(*command, "--bootstrap-server", address)
            assert result.returncode == 1
            err = result.stderr.decode()
            assert f"{address} is not a Kafka broker: it answered 'HTTP/1.1 400 Bad Request'" \
                in err, err
            assert "frame of" not in err and "Traceback" not in err


def test_a_silent_peer_gives_up_after_the_timeout_naming_the_address():
    with peer(None) as address:
        result = databus("topics", "list", "--bootstrap-server", address, "--timeout", "2")
        assert result.returncode == 1
        assert result.stderr.decode().splitlines() == [
            f"databus topics: no answer from {address} within 2s"]
        # with a shorter request timeout, the handshake itself is named
        result = databus("topics", "list", "--bootstrap-server", address, "--timeout", "20",
                         "-X", "request.timeout.ms=1000")
        assert result.returncode == 1
        assert (f"{address} accepted the connection but did not answer the Kafka handshake "
                "(ApiVersions) within 1s") in result.stderr.decode()


def test_consume_names_a_decompression_bomb_in_one_line(broker, topic):
    """A hand-built zstd batch of ~1 KiB holding a 4 MiB record, over the consumer's
    max.decompressed.batch.bytes: one line naming topic, partition and offset, exit 1."""
    from databus.protocol.codecs import CODEC_ZSTD
    from databus.protocol.records import Record, build_batch
    from tests.broker.test_fetch import produce_to
    from tests.broker.wire import WireClient

    from ..broker.test_api_versions import create_topic

    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        produce_to(client, topic, 0, build_batch([Record(0, 1, None, b"ok")]))
        produce_to(client, topic, 0, build_batch([Record(0, 1, None, b"\0" * (4 << 20))],
                                                 codec=CODEC_ZSTD))
    result = databus("consume", "--bootstrap", broker.bootstrap, "--topic", topic,
                     "--from-beginning", "--timeout-ms", "5000",
                     "-X", "max.decompressed.batch.bytes=1048576")
    assert result.returncode == 1
    assert result.stdout == b"ok\n"  # the record before the bomb
    assert result.stderr.decode().splitlines() == [
        f"databus consume: CORRUPT_MESSAGE: {topic}-0 at offset 1: batch at byte 0: zstd "
        "data decompresses to more than the limit of 1048576 bytes "
        "(max.decompressed.batch.bytes)"
    ]


def test_consume_with_a_group_is_quiet_on_stderr_by_default(broker, topic):
    """As Kafka's console consumer: the records on stdout, on stderr only the closing count;
    the group's own lines ("assigned [...]") with --log-level INFO."""
    b = ["--bootstrap", broker.bootstrap]
    assert databus("topics", "create", *b, "--topic", topic, "--partitions", "2").returncode == 0
    assert databus("produce", *b, "--topic", topic, stdin=b"a\nb\n").returncode == 0
    consume = [sys.executable, "-m", "databus.cli", "consume", *b, "--topic", topic,
               "--group", f"quiet-{topic}", "--from-beginning", "--max-messages", "2"]
    quiet = subprocess.run(consume, capture_output=True, timeout=60, cwd=ROOT, check=False)
    assert quiet.returncode == 0, quiet.stderr
    assert sorted(quiet.stdout.splitlines()) == [b"a", b"b"]
    assert quiet.stderr == b"Processed a total of 2 messages\n"
    assert databus("produce", *b, "--topic", topic, stdin=b"c\n").returncode == 0
    loud = subprocess.run([*consume[:3], "--log-level", "INFO", *consume[3:-1], "1"],
                          capture_output=True, timeout=60, cwd=ROOT, check=False)
    assert loud.stdout == b"c\n"
    assert b" INFO " in loud.stderr and b"assigned" in loud.stderr
