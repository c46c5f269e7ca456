"""``databus groups`` against a real broker with a real confluent-kafka consumer group."""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from databus.cli import main
from tests.groups.harness import create_topic, produce
from tests.helpers.broker import BrokerProcess

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


def test_groups_cli_lifecycle(cli_broker, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cli_broker.bootstrap, "group.id": GROUP,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": 6000, "client.id": "cli-test-consumer",
    })
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 10 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                seen += 1
        assert seen == 10
        consumer.commit(asynchronous=False)

        assert groups(cli_broker, "describe", GROUP) == 0
        out = capsys.readouterr().out
        assert "state Stable" in out and "cli-test-consumer" in out
        rows = [line for line in out.splitlines() if TOPIC in line]
        assert len(rows) == 2
        for row in rows:
            cells = [c.strip() for c in row.split("│") if c.strip()]
            assert cells[2:5] == ["5", "5", "0"]  # current, log end, lag

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
