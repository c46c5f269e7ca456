"""``databus groups`` against a real broker with a real confluent-kafka consumer group."""

from __future__ import annotations

import subprocess
import sys
import time

import confluent_kafka
import confluent_kafka.admin
import pytest

from databus.cli import main
from tests.groups.harness import create_topic, produce
from tests.helpers.broker import BrokerProcess
from tests.helpers.terminal import run_in_terminal, without_overrides

TOPIC, GROUP = "cli-topic", "cli-group"


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("groups-cli"),
                       options={"group.initial.rebalance.delay.ms": 0}) as broker:
        create_topic(broker.bootstrap, TOPIC, 2)
        produce(broker.bootstrap, TOPIC, [f"v{i}" for i in range(10)], 2)
        yield broker


def groups(broker, *args) -> int:
    return main(["groups", "--bootstrap", broker.bootstrap, "--timeout", "20", *args])


def committed(broker) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": GROUP})
    try:
        parts = consumer.committed([confluent_kafka.TopicPartition(TOPIC, p) for p in (0, 1)],
                                   20)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        consumer.close()


def consume_all_and_commit(consumer) -> None:
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 10 and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            seen += 1
    assert seen == 10
    consumer.commit(asynchronous=False)


def test_groups_cli_lifecycle(cli_broker, capsys):
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cli_broker.bootstrap, "group.id": GROUP,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": 6000, "client.id": "cli-test-consumer",
    })
    try:
        consume_all_and_commit(consumer)

        assert groups(cli_broker, "describe", GROUP) == 0
        out = capsys.readouterr().out
        assert "state Stable" in out and "cli-test-consumer" in out
        rows = [line for line in out.splitlines() if TOPIC in line]
        assert len(rows) == 2
        for row in rows:  # captured output is not a terminal: Kafka's plain columns
            assert row.split()[3:6] == ["5", "5", "0"]  # current, log end, lag

        # A live group's offsets belong to its consumers.
        assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC,
                      "--to-earliest", "--execute") == 1
        assert "inactive" in capsys.readouterr().err
    finally:
        consumer.close()

    assert groups(cli_broker, "list") == 0
    out = capsys.readouterr().out
    assert GROUP in out and "Empty" in out and "consumer" in out

    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest") == 0
    assert "dry run" in capsys.readouterr().out
    assert committed(cli_broker) == {0: 5, 1: 5}

    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest",
                  "--execute") == 0
    assert committed(cli_broker) == {0: 0, 1: 0}
    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", f"{TOPIC}:1",
                  "--shift-by", "3", "--execute") == 0
    assert committed(cli_broker) == {0: 0, 1: 3}
    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC, "--shift-by", "-10",
                  "--execute") == 0
    assert committed(cli_broker) == {0: 0, 1: 0}
    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC,
                  "--to-datetime", "2999-01-01T00:00:00+00:00", "--execute") == 0
    assert committed(cli_broker) == {0: 5, 1: 5}
    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC,
                  "--to-datetime", "2000-01-01T00:00:00+00:00", "--execute") == 0
    assert committed(cli_broker) == {0: 0, 1: 0}
    assert groups(cli_broker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-latest",
                  "--execute") == 0
    assert committed(cli_broker) == {0: 5, 1: 5}
    capsys.readouterr()

    assert groups(cli_broker, "delete", GROUP) == 0
    assert f"deleted group '{GROUP}'" in capsys.readouterr().out
    assert groups(cli_broker, "list") == 0
    assert GROUP not in capsys.readouterr().out
    assert groups(cli_broker, "delete", GROUP) == 1
    assert "GROUP_ID_NOT_FOUND" in capsys.readouterr().err
    assert committed(cli_broker) == {0: -1001, 1: -1001}


def test_bad_input_is_named(cli_broker, capsys):
    assert groups(cli_broker, "reset-offsets", "g", "--topic", "no-such-topic",
                  "--to-earliest") == 1
    assert "no-such-topic" in capsys.readouterr().err
    assert groups(cli_broker, "reset-offsets", "g", "--topic", TOPIC, "--to-datetime",
                  "yesterday") == 1
    assert "ISO-8601" in capsys.readouterr().err
    assert groups(cli_broker, "describe", "never-seen") == 1
    assert "does not exist" in capsys.readouterr().out


def test_unreachable_broker_is_one_line(capsys):
    assert main(["groups", "--bootstrap", "127.0.0.1:1", "--timeout", "3", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("databus groups:") and "Traceback" not in err


def test_connection_options_also_after_the_action(capsys):
    # as with kafka-consumer-groups.sh, --bootstrap may follow the action; the port here is
    # closed, so reaching it proves the option after the action was the one used
    assert main(["groups", "list", "--bootstrap", "127.0.0.1:1", "--timeout", "3"]) == 1
    err = capsys.readouterr().err
    assert "127.0.0.1:1" in err and "Traceback" not in err


# -- output shape: Kafka's columns in a pipe or a narrow terminal, a full rich table otherwise --

COLUMNS_GROUP = "cli-columns-group"
DESCRIBE_HEADERS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID")


@pytest.fixture(scope="module")
def live_group(cli_broker):
    """A Stable group whose one member consumed all of TOPIC and committed (5, 5); the
    member stays in the group (librdkafka heartbeats in the background) for these tests."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cli_broker.bootstrap, "group.id": COLUMNS_GROUP,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": 30000, "client.id": "cli-columns-consumer",
    })
    try:
        consume_all_and_commit(consumer)
        yield consumer
    finally:
        consumer.close()


def expected_rows(broker) -> list[tuple[str, ...]]:
    """The rows, from librdkafka's view of the group (member ids and hosts as the broker
    reports them) and the known offsets: all 10 records read, 5 per partition."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    group = admin.describe_consumer_groups([COLUMNS_GROUP])[COLUMNS_GROUP].result(20)
    rows = [(COLUMNS_GROUP, tp.topic, str(tp.partition), "5", "5", "0", m.member_id, m.host,
             m.client_id)
            for m in group.members for tp in m.assignment.topic_partitions]
    assert len(rows) == 2
    return sorted(rows, key=lambda r: (r[1], int(r[2])))


def kafka_describe_lines(rows) -> list[str]:
    """The header and rows as kafka-consumer-groups.sh --describe prints them (its format:
    group, topic, consumer id and host at least 15 wide, PARTITION 10, offsets 15)."""
    def width(i: int) -> int:
        return max([15, *(len(r[i]) for r in rows)])

    fmt = (f"%-{width(0)}s %-{width(1)}s %-10s %-15s %-15s %-15s %-{width(6)}s "
           f"%-{width(7)}s %s")
    return [fmt % line for line in (DESCRIBE_HEADERS, *rows)]


def describe_argv(broker) -> list[str]:
    return [sys.executable, "-m", "databus.cli", "groups", "--bootstrap", broker.bootstrap,
            "--timeout", "20", "describe", COLUMNS_GROUP]


def test_describe_into_a_pipe_prints_kafkas_columns(cli_broker, live_group):
    result = subprocess.run(describe_argv(cli_broker), capture_output=True, text=True,
                            timeout=60, env=without_overrides(), check=False)
    assert result.returncode == 0, result.stderr
    summary, *table = result.stdout.splitlines()
    assert summary.startswith(f"group {COLUMNS_GROUP}: state Stable")
    assert table == kafka_describe_lines(expected_rows(cli_broker))
    # what scripts do with it
    assert [line.split()[5] for line in table] == ["LAG", "0", "0"]


def test_describe_in_an_80_column_terminal_keeps_headers_whole(cli_broker, live_group):
    # the table is wider than 80 columns: Kafka's plain columns rather than cut headers
    summary, *table = run_in_terminal(describe_argv(cli_broker), columns=80).splitlines()
    assert summary.startswith(f"group {COLUMNS_GROUP}: state Stable")
    assert table == kafka_describe_lines(expected_rows(cli_broker))


def test_describe_in_a_wide_terminal_is_a_whole_rich_table(cli_broker, live_group):
    text = run_in_terminal(describe_argv(cli_broker), columns=250)
    assert "…" not in text
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == list(DESCRIBE_HEADERS)
    rows = [tuple(cell.strip() for cell in line.strip("│").split("│"))
            for line in text.splitlines() if line.startswith("│")]
    assert rows == expected_rows(cli_broker)
