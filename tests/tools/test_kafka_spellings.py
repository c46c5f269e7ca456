"""The console tools with Kafka's spellings and options, run as ``databus ...`` subprocesses
against a real broker.  Effects are checked through librdkafka (confluent-kafka), the
client Kafka's own tooling is compared with, and output against the formats Kafka's
kafka-topics.sh / kafka-console-consumer / kafka-consumer-groups.sh print."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import uuid
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

ROOT = Path(__file__).resolve().parents[2]


def databus(*args: str, stdin: bytes = b"", log_level: str | None = "WARNING",
            timeout: float = 60) -> subprocess.CompletedProcess:
    top = ["--log-level", log_level] if log_level else []
    return subprocess.run([sys.executable, "-m", "databus.cli", *top, *args], input=stdin,
                          capture_output=True, timeout=timeout, cwd=ROOT, check=False)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout.decode()


@pytest.fixture
def name():
    return f"kt-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def bs(broker):
    return ["--bootstrap-server", broker.bootstrap]


def rdkafka_admin(broker):
    return confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})


def partition_count(broker, topic: str) -> int:
    md = rdkafka_admin(broker).list_topics(topic, timeout=20)
    return len(md.topics[topic].partitions)


def topic_config(broker, topic: str) -> dict[str, str]:
    resource = confluent_kafka.admin.ConfigResource("topic", topic)
    admin = rdkafka_admin(broker)  # kept alive until the answer arrives
    (future,) = admin.describe_configs([resource]).values()
    return {k: e.value for k, e in future.result(20).items()}


# -- spellings -------------------------------------------------------------------------------


def test_kafka_action_flags_bootstrap_server_and_log_level_after_the_command(broker, bs, name):
    # kafka-topics.sh --create --bootstrap-server B --topic T --partitions 2
    assert ok(databus("topics", "--create", *bs, "--topic", name, "--partitions", "2",
                      "--log-level", "WARNING", log_level=None)) == f"Created topic {name}.\n"
    assert partition_count(broker, name) == 2
    # our shorter spellings stay: the action word and --bootstrap
    assert name in ok(databus("topics", "list", "--bootstrap", broker.bootstrap)).split()


def test_an_unknown_log_level_is_refused_naming_it(bs):
    result = databus("topics", "list", *bs, "--log-level", "LOUD", log_level=None)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "databus: unknown --log-level 'LOUD' (one of DEBUG, INFO, WARNING, WARN, ERROR, "
        "CRITICAL)"]


# -- topics ----------------------------------------------------------------------------------


def test_topics_if_not_exists_and_if_exists(broker, bs, name):
    ok(databus("topics", "create", *bs, "--topic", name, "--partitions", "1"))
    again = databus("topics", "create", *bs, "--topic", name)
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in again.stderr
    assert ok(databus("topics", "create", *bs, "--topic", name, "--if-not-exists")) == ""
    missing = f"{name}-missing"
    for action in (["delete"], ["alter", "--partitions", "3"], ["describe"]):
        refused = databus("topics", *action, *bs, "--topic", missing)
        assert refused.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in refused.stderr, action
        assert ok(databus("topics", *action, *bs, "--topic", missing, "--if-exists")) == ""
    wrong = databus("topics", "list", *bs, "--if-exists")
    assert wrong.returncode == 2 and b"--if-exists only applies to" in wrong.stderr


def test_topics_alter_partitions_and_configs(broker, bs, name):
    ok(databus("topics", "create", *bs, "--topic", name, "--partitions", "2",
               "--config", "retention.ms=1000"))
    assert ok(databus("topics", "--alter", *bs, "--topic", name, "--partitions", "5")) == \
        f"Altered partitions of topic {name}.\n"
    assert partition_count(broker, name) == 5
    smaller = databus("topics", "alter", *bs, "--topic", name, "--partitions", "3")
    assert smaller.returncode == 1
    assert b"INVALID_PARTITIONS" in smaller.stderr and b"has 5 partitions" in smaller.stderr
    assert partition_count(broker, name) == 5

    ok(databus("topics", "alter", *bs, "--topic", name, "--config", "segment.bytes=1048576",
               "--delete-config", "retention.ms"))
    configs = topic_config(broker, name)
    assert configs["segment.bytes"] == "1048576"
    assert configs["retention.ms"] != "1000"  # back to the broker's default
    bad = databus("topics", "alter", *bs, "--topic", name, "--config", "no.such.config=1")
    assert bad.returncode == 1 and b"no.such.config" in bad.stderr

    # kafka-topics.sh --describe: the first line lists only the non-default configs
    described = ok(databus("topics", "describe", *bs, "--topic", name)).splitlines()
    assert described[0].endswith("\tPartitionCount: 5\tReplicationFactor: 1"
                                 "\tConfigs: segment.bytes=1048576")
    assert described[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"
                             for p in range(5)]


def test_topics_json(broker, bs, name):
    ok(databus("topics", "create", *bs, "--topic", name, "--partitions", "2",
               "--config", "cleanup.policy=compact"))
    listed = json.loads(ok(databus("topics", "list", *bs, "--json")))
    assert name in listed["topics"]
    doc = json.loads(ok(databus("topics", "describe", *bs, "--topic", name, "--json")))
    (topic,) = doc["topics"]
    text = ok(databus("topics", "describe", *bs, "--topic", name))
    topic_id = text.split("\tTopicId: ")[1].split("\t")[0]
    assert len(topic_id) == 36  # a UUID, the same in both forms
    assert topic == {
        "name": name, "topic_id": topic_id,
        "partition_count": 2, "replication_factor": 1,
        "configs": {"cleanup.policy": "compact"},
        "partitions": [{"partition": p, "leader": 1, "replicas": [1], "isr": [1]}
                       for p in range(2)],
    }
    assert doc["errors"] == {}


# -- console consumer / producer -------------------------------------------------------------


def test_producer_properties_and_consumer_formatter(broker, bs, name):
    ok(databus("topics", "create", *bs, "--topic", name, "--partitions", "2"))
    # kafka-console-producer --property parse.key=true --property parse.headers=true: the
    # line is HEADERS<TAB>KEY<TAB>VALUE, headers h:v joined with commas
    lines = b"h1:a,h2:b\tk1\tv1\n\tk2\tv2\nno delimiters\n"
    produced = databus("produce", *bs, "--topic", name, "--partition", "1",
                       "--property", "parse.key=true", "--property", "parse.headers=true",
                       stdin=lines)
    assert produced.returncode == 1  # the third line is refused, named, and not sent
    assert b"line 3 has no headers delimiter" in produced.stderr
    assert b"2 of 3 message(s) delivered" in produced.stderr

    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": name, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(name, 1, 0)])
        got = [consumer.poll(20) for _ in range(2)]
    finally:
        consumer.close()
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (b"k1", b"v1", [("h1", b"a"), ("h2", b"b")]), (b"k2", b"v2", None)]
    stamps = [m.timestamp()[1] for m in got]

    # kafka-console-consumer --partition 1 --offset 0 with every print.* property: Kafka's
    # DefaultMessageFormatter order, key.separator between the fields
    out = databus("consume", *bs, "--topic", name, "--partition", "1", "--offset", "earliest",
                  "--max-messages", "2", "--timeout-ms", "10000",
                  *[x for p in ("print.timestamp", "print.partition", "print.offset",
                                "print.headers", "print.key") for x in ("--property", f"{p}=true")],
                  "--property", "key.separator=|")
    assert ok(out).splitlines() == [
        f"CreateTime:{stamps[0]}|Partition:1|Offset:0|h1:a,h2:b|k1|v1",
        f"CreateTime:{stamps[1]}|Partition:1|Offset:1|NO_HEADERS|k2|v2",
    ]
    from_one = databus("consume", *bs, "--topic", name, "--partition", "1", "--offset", "1",
                       "--timeout-ms", "3000", "--print-key", "--isolation-level",
                       "read_committed", "--skip-message-on-error")
    assert ok(from_one) == "k2\tv2\n"


def test_consumer_and_producer_refuse_bad_options_by_name(bs, name):
    cases = [
        (["consume", "--offset", "3"], "--offset needs --partition"),
        (["consume", "--partition", "0", "--offset", "-2"], "--offset '-2'"),
        (["consume", "--property", "print.color=true"], "unknown --property 'print.color'"),
        (["consume", "--property", "print.key=yes"], "print.key=yes: expected true or false"),
        (["produce", "--property", "parse.key"], "--property expects K=V"),
        (["produce", "--producer-property", "linger.ms"], "-X expects key=value"),
        (["produce", "--producer.config", "/nonexistent/p.properties"], "cannot read"),
    ]
    for argv, message in cases:
        result = databus(*argv, *bs, "--topic", name)
        assert result.returncode == 2, argv
        assert message in result.stderr.decode(), (argv, result.stderr)


def test_producer_config_file_and_kafka_option_names(broker, bs, name, tmp_path):
    ok(databus("topics", "create", *bs, "--topic", name, "--partitions", "1"))
    props = tmp_path / "producer.properties"
    props.write_text("# as kafka-console-producer --producer.config reads it\n"
                     "linger.ms=5\nclient.id=from-file\n")
    ok(databus("produce", *bs, "--topic", name, "--producer.config", str(props),
               "--compression-codec", "gzip", "--request-required-acks", "all",
               "--property", "parse.key=true", "--property", "key.separator=\\t",
               stdin=b"a\t1\nb\t2\n"))
    out = databus("consume", *bs, "--topic", name, "--from-beginning", "--max-messages", "2",
                  "--property", "print.key=true", "--property", "key.separator=\\t",
                  "--consumer-property", "fetch.min.bytes=1", "--timeout-ms", "10000")
    assert ok(out) == "a\t1\nb\t2\n"


# -- groups ----------------------------------------------------------------------------------


def committed(broker, group: str, topic: str, partitions=(0, 1)) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": group})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p)
                                    for p in partitions], 20)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


@pytest.fixture
def empty_group(broker, bs, name):
    """A group that read all of a 2-partition topic (5 records each) and left: Empty."""
    ok(databus("topics", "create", *bs, "--topic", name, "--partitions", "2"))
    for p in (0, 1):
        ok(databus("produce", *bs, "--topic", name, "--partition", str(p),
                   stdin=b"".join(b"v%d\n" % i for i in range(5))))
    group = f"{name}-group"
    ok(databus("consume", *bs, "--topic", name, "--group", group, "--from-beginning",
               "--max-messages", "10", "--timeout-ms", "20000"))
    assert committed(broker, group, name) == {0: 5, 1: 5}
    return group


def test_groups_group_option_state_members_and_json(broker, bs, name, empty_group):
    groups = ["groups", *bs, "--timeout", "20"]
    # kafka-consumer-groups.sh --describe --group G --state
    state = ok(databus(*groups, "--describe", "--group", empty_group, "--state")).splitlines()
    assert state[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                "#MEMBERS"]
    assert state[1].split() == [empty_group, broker.bootstrap, "(1)", "-", "Empty", "0"]
    members = ok(databus(*groups, "describe", "--group", empty_group, "--members"))
    assert members == f"Consumer group '{empty_group}' has no active members.\n"
    offsets = ok(databus(*groups, "describe", "--group", empty_group, "--offsets"))
    assert [line.split()[:6] for line in offsets.splitlines()[2:]] == [
        [empty_group, name, str(p), "5", "5", "0"] for p in (0, 1)]

    doc = json.loads(ok(databus(*groups, "describe", "--group", empty_group, "--json")))
    (g,) = doc["groups"]
    assert g["group"] == empty_group and g["state"] == "Empty" and g["members"] == []
    assert g["coordinator"] == {"id": 1, "address": broker.bootstrap}
    assert g["offsets"] == [
        {"topic": name, "partition": p, "current_offset": 5, "log_end_offset": 5, "lag": 0,
         "consumer_id": None, "host": None, "client_id": None} for p in (0, 1)]
    listed = json.loads(ok(databus(*groups, "list", "--json", "--state", "Empty")))
    assert {"group": empty_group, "state": "Empty", "protocol_type": "consumer",
            "type": "classic"} \
        in listed["groups"]
    others = json.loads(ok(databus(*groups, "list", "--json", "--state", "Stable,Dead")))
    assert all(x["state"] in ("Stable", "Dead") for x in others["groups"])
    assert empty_group not in [x["group"] for x in others["groups"]]
    everything = json.loads(ok(databus(*groups, "describe", "--all-groups", "--json")))
    assert empty_group in [x["group"] for x in everything["groups"]]
    neither = databus(*groups, "describe")
    assert neither.returncode == 2 and b"name a group" in neither.stderr


def test_groups_reset_offsets_kafka_targets(broker, bs, name, empty_group):
    reset = ["groups", *bs, "--timeout", "20", "--reset-offsets", "--group", empty_group]
    # --dry-run (explicit) and --export: Kafka's CSV plan, nothing committed
    plan = databus(*reset, "--all-topics", "--to-offset", "2", "--dry-run", "--export")
    assert list(csv.reader(io.StringIO(ok(plan)))) == [[name, "0", "2"], [name, "1", "2"]]
    assert b"dry run" in plan.stderr
    assert committed(broker, empty_group, name) == {0: 5, 1: 5}

    ok(databus(*reset, "--topic", f"{name}:1", "--to-offset", "2", "--execute"))
    assert committed(broker, empty_group, name) == {0: 5, 1: 2}
    ok(databus(*reset, "--all-topics", "--to-offset", "99", "--execute"))  # kept in range
    assert committed(broker, empty_group, name) == {0: 5, 1: 5}
    ok(databus(*reset, "--topic", name, "--shift-by", "-3", "--execute"))
    ok(databus(*reset, "--topic", name, "--to-current", "--execute"))  # no change
    assert committed(broker, empty_group, name) == {0: 2, 1: 2}
    # every record was written moments ago: an hour back is the start of the log
    ok(databus(*reset, "--topic", name, "--by-duration", "PT1H", "--execute"))
    assert committed(broker, empty_group, name) == {0: 0, 1: 0}
    bad = databus(*reset, "--topic", name, "--by-duration", "1h")
    assert bad.returncode == 1 and b"--by-duration '1h' is not a duration" in bad.stderr
    both = databus(*reset, "--topic", name, "--to-latest", "--dry-run", "--execute")
    assert both.returncode == 2
    assert committed(broker, empty_group, name) == {0: 0, 1: 0}

    # with several groups the CSV starts with the group, as Kafka's does
    other = f"{empty_group}-2"
    ok(databus("groups", *bs, "reset-offsets", other, "--topic", name, "--to-latest",
               "--execute"))
    rows = list(csv.reader(io.StringIO(ok(databus(
        "groups", *bs, "reset-offsets", "--group", empty_group, "--group", other,
        "--topic", f"{name}:0", "--to-earliest", "--export")))))
    assert rows == [[empty_group, name, "0", "0"], [other, name, "0", "0"]]

    ok(databus("groups", *bs, "--delete", "--group", other))
    assert committed(broker, other, name) == {0: -1001, 1: -1001}
