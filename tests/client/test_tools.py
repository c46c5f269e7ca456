"""The console tools as users run them: ``databus produce | consume | topics`` subprocesses
against a real broker."""

from __future__ import annotations

import subprocess
import sys
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
