"""The broker benches as a user runs them: right after `make run` (no confluent-kafka), and
as kafka-producer-perf-test / kafka-consumer-perf-test (their options and lines).  Tiny sizes:
these check behaviour and output, never speed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

from databus.bench.perf_test import (
    CONSUMER_HEADER,
    ProducerStats,
    consumer_line,
    consumer_summary,
    pacing_delay,
    percentile,
    summary_line,
)

ROOT = Path(__file__).resolve().parents[2]
HINT = "pip install 'databus[bench]'"


@pytest.fixture(scope="module")
def without_confluent_kafka(tmp_path_factory) -> dict[str, str]:
    """An environment in which ``import confluent_kafka`` fails, as in a fresh `make run`
    virtualenv: a package of that name that raises ImportError shadows the installed one."""
    root = tmp_path_factory.mktemp("no-confluent")
    (root / "confluent_kafka").mkdir()
    (root / "confluent_kafka" / "__init__.py").write_text(
        "raise ImportError('confluent_kafka is not installed here')\n")
    return {**os.environ, "PYTHONPATH": str(root)}


def bench(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "databus.cli", "--log-level", "WARNING",
                           "bench", *args], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env=env, check=False)


def topics(broker) -> set[str]:
    md = confluent_kafka.admin.AdminClient(
        {"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20)
    return {t for t in md.topics if not t.startswith("__")}


def test_the_shadow_really_hides_confluent_kafka(without_confluent_kafka):
    probe = subprocess.run([sys.executable, "-c", "import confluent_kafka"],
                           env=without_confluent_kafka, capture_output=True, text=True,
                           check=False)
    assert probe.returncode == 1 and "ImportError" in probe.stderr


@pytest.mark.parametrize("name, options, skipped", [
    ("produce", ["--records", "20000", "--partitions", "2"], "produce acks=1 (librdkafka)"),
    ("consume", ["--records", "20000", "--partitions", "2", "--rounds", "1"],
     "consume round 1 (librdkafka)"),
    ("client-produce", ["--records", "3000", "--partitions", "2",
                        "--clients", "librdkafka,databus-c"],
     "librdkafka (confluent-kafka produce())"),
    # ours on the pure-Python code (a child process with DATABUS_PURE_PYTHON=1) and a peer
    ("client-consume", ["--records", "3000", "--partitions", "2",
                        "--clients", "librdkafka,databus-pure,kafka-python"],
     "librdkafka (confluent-kafka consume())"),
    ("client-consume", ["--records", "3000", "--partitions", "2", "--columnar",
                        "--clients", "librdkafka,databus-c"],
     "librdkafka consume() + Arrow columns built in Python"),
])
def test_benches_run_without_confluent_kafka_and_clean_up(broker, without_confluent_kafka,
                                                          name, options, skipped):
    before = topics(broker)
    result = bench(name, "--bootstrap-server", broker.bootstrap, *options,
                   env=without_confluent_kafka)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{skipped}: skipped: confluent-kafka is not installed ({HINT})" in result.stdout
    assert "records/s" in result.stdout  # the rest ran and printed its table
    if "--columnar" in options:
        assert "databus.client getmany_columns() -> Arrow, C extension" in result.stdout
    elif name == "client-consume":  # the rows --clients asked for
        assert "Consumer.poll(), pure Python" in result.stdout
        assert "kafka-python KafkaConsumer.poll()" in result.stdout
    assert topics(broker) == before  # the bench's topics were deleted


def test_groups_bench_runs_without_confluent_kafka(broker, without_confluent_kafka):
    before = topics(broker)
    result = bench("groups", "--bootstrap-server", broker.bootstrap, "--commits", "20",
                   "--connections", "2", "--groups", "2", "--members", "2",
                   "--rebalances", "1", "--json", env=without_confluent_kafka)
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert [r["operation"] for r in doc["results"]][0] == "offset commit, 1 connection"
    assert doc["results"][0]["count"] == 20
    assert topics(broker) == before


def test_bench_json_and_keep_topic(broker):
    result = bench("client-produce", "--bootstrap-server", broker.bootstrap, "--records",
                   "2000", "--partitions", "1", "--json", "--keep-topic",
                   "--clients", "librdkafka,databus-c,aiokafka")
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert [r["name"] for r in doc["results"]] == [
        "librdkafka (confluent-kafka produce())",
        "databus.client Producer.send(), C extension",
        "aiokafka AIOKafkaProducer.send()",
    ]
    assert doc["results"][0]["vs_librdkafka"] == 1.0 and doc["skipped"] == {}
    assert doc["results"][2]["vs_aiokafka"] == 1.0
    assert all(r["records"] == 2000 and r["record_size"] == 100 for r in doc["results"])
    kept = {t for t in topics(broker) if t.startswith("bench-client-produce-")}
    assert len(kept) == 3


# -- kafka-producer-perf-test ----------------------------------------------------------------

# Kafka's ProducerPerformance printf formats, as regular expressions.
WINDOW = re.compile(r"\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
                    r"latency, [\d.]+ ms max latency\.")
SUMMARY = re.compile(r"(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), "
                     r"\d+\.\d\d ms avg latency, \d+\.\d\d ms max latency, \d+ ms 50th, "
                     r"\d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.")


def end_offsets(broker, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "perf-check"})
    try:
        md = consumer.list_topics(topic, timeout=20)
        return sum(consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, p), timeout=20)[1]
            for p in md.topics[topic].partitions)
    finally:
        consumer.close()


def test_producer_perf_test_options_and_summary(broker, without_confluent_kafka):
    topic = "perf-test-kafka-options"
    result = bench("produce", "--topic", topic, "--num-records", "3000", "--record-size",
                   "64", "--throughput", "-1", "--producer-props",
                   f"bootstrap.servers={broker.bootstrap}", "acks=all", "linger.ms=2",
                   "--print-metrics", "--keep-topic", env=without_confluent_kafka)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    summaries = [m for m in map(SUMMARY.fullmatch, lines) if m]
    assert len(summaries) == 1 and summaries[0][1] == "3000"
    assert all(WINDOW.fullmatch(line) or SUMMARY.fullmatch(line)
               for line in lines[:lines.index(summaries[0][0]) + 1])
    assert "producer-metrics:delivered_records" in result.stdout
    assert end_offsets(broker, topic) == 3000  # kept, and holding every record


def test_producer_perf_test_deletes_its_topic_and_json(broker):
    before = topics(broker)
    result = bench("produce", "--bootstrap-server", broker.bootstrap, "--num-records", "500",
                   "--record-size", "10", "--throughput", "100000", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert doc["records"] == 500
    assert set(doc) >= {"records_per_s", "mb_per_s", "avg_latency_ms", "max_latency_ms",
                        "p50_ms", "p95_ms", "p99_ms", "p999_ms"}
    assert doc["p50_ms"] <= doc["p95_ms"] <= doc["p99_ms"] <= doc["p999_ms"] \
        <= doc["max_latency_ms"]
    assert topics(broker) == before


# -- kafka-consumer-perf-test ----------------------------------------------------------------


def test_consumer_perf_test_reads_n_messages_and_prints_kafkas_lines(broker):
    result = bench("consume", "--bootstrap-server", broker.bootstrap, "--messages", "2000",
                   "--record-size", "50", "--timeout", "30000", "--group", "perf-cli-group")
    assert result.returncode == 0, result.stderr[-3000:]
    header, row = result.stdout.splitlines()
    assert header == CONSUMER_HEADER
    fields = row.split(", ")
    assert len(fields) == 10
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", fields[0])
    assert fields[4] == "2000" and float(fields[2]) == pytest.approx(2000 * 50 / 2**20, 1e-3)


def test_consumer_perf_test_gives_up_after_timeout_naming_it(broker):
    empty = "perf-empty-topic"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(empty, 1)])[empty].result(20)
    result = bench("consume", "--bootstrap-server", broker.bootstrap, "--topic", empty,
                   "--messages", "10", "--timeout", "500", "--hide-header")
    assert result.returncode == 1
    assert "timeout (500 ms) exceeded; 0 of 10 consumed" in result.stderr
    assert CONSUMER_HEADER not in result.stdout


def test_fetch_sessions_bench_answers_nothing_to_an_idle_incremental_fetch(broker):
    before = topics(broker)
    result = bench("fetch-sessions", "--bootstrap-server", broker.bootstrap, "--partitions",
                   "20", "--fetches", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split("  ")[0]: line.split() for line in result.stdout.splitlines()
            if line.startswith(("sessionless", "incremental"))}
    assert rows["sessionless (full)"][-1] == "20" and rows["incremental (session)"][-1] == "0"
    assert topics(broker) == before


# -- the statistics, without I/O -------------------------------------------------------------


def test_percentiles_and_summary_line_are_kafkas():
    stats = ProducerStats(record_size=1024 * 1024, start=0.0)
    lines = [stats.record(float(ms), now=ms / 1000) for ms in range(1, 1001)]
    assert [line for line in lines if line] == []  # one second: no 5-second window closed
    assert stats.record(1.0, now=5.0) == ("1001 records sent, 200.2 records/sec "
                                          "(200.20 MB/sec), 500.0 ms avg latency, "
                                          "1000.0 ms max latency.")
    summary = stats.summary(end=10.0)
    assert summary_line(summary) == (
        "1001 records sent, 100.100000 records/sec (100.10 MB/sec), 500.00 ms avg latency, "
        "1000.00 ms max latency, 500 ms 50th, 950 ms 95th, 990 ms 99th, 999 ms 99.9th.")
    assert percentile([], 0.5) == 0.0


def test_pacing_waits_only_when_ahead():
    assert pacing_delay(sent=100, throughput=100, elapsed=0.5) == pytest.approx(0.5)
    assert pacing_delay(sent=100, throughput=100, elapsed=2.0) < 0
    assert pacing_delay(sent=10**6, throughput=-1, elapsed=0.0) == 0.0


def test_consumer_summary_splits_out_the_rebalance():
    s = consumer_summary(start=0.0, end=4.0, records=1000, nbytes=2 * 2**20, rebalance_ms=3000)
    assert (s["mb_per_s"], s["records_per_s"]) == (0.5, 250.0)
    assert (s["rebalance_time_ms"], s["fetch_time_ms"]) == (3000, 1000)
    assert (s["fetch_mb_per_s"], s["fetch_records_per_s"]) == (2.0, 1000.0)
    assert consumer_line(s).split(", ")[2:] == ["2.0000", "0.5000", "1000", "250.0000",
                                               "3000", "1000", "2.0000", "1000.0000"]
