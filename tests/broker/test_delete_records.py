"""DeleteRecords (21) through confluent-kafka's AdminClient.delete_records, our Admin (via
``databus topics delete-records``), and a kill -9: the log start offset the broker answered
with holds after the crash."""

from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

from .clients import Msg, confluent_consume, confluent_produce


def databus(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "databus.cli", "--log-level", "WARNING", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def low_watermark(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lw"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)[0]
    finally:
        consumer.close()


def test_delete_records_survives_kill9_and_the_cli_deletes_more(tmp_path):
    with BrokerProcess(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("dr", 2), NewTopic(
            "dr-compact", 1, config={"cleanup.policy": "compact"})])["dr"].result(30)
        for p in (0, 1):
            confluent_produce(broker.bootstrap, "dr",
                              [Msg(b"k", b"%d-%d" % (p, i), partition=p) for i in range(10)])
        futures = admin.delete_records([TopicPartition("dr", 0, 4), TopicPartition("dr", 1, -1)])
        lows = {tp.partition: f.result(30).low_watermark for tp, f in futures.items()}
        assert lows == {0: 4, 1: 10}
        (past_end,) = admin.delete_records([TopicPartition("dr", 0, 11)]).values()
        try:
            past_end.result(30)
            raise AssertionError("deleting past the high watermark was accepted")
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

        broker.restart()  # kill -9 right after the answers, then start on the same data

        assert low_watermark(broker.bootstrap, "dr", 0) == 4
        assert low_watermark(broker.bootstrap, "dr", 1) == 10
        got = confluent_consume(broker.bootstrap, "dr", 6, (0,))
        assert [(g.offset, g.value) for g in got] == [(i, b"0-%d" % i) for i in range(4, 10)]

        done = databus("topics", "delete-records", "--bootstrap-server", broker.bootstrap,
                       "--topic", "dr", "--partition", "0", "--offset", "7")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "Executing records delete operation", "Records delete operation completed:",
            "partition: dr-0\tlow_watermark: 7"]
        offsets = tmp_path / "offsets.json"
        offsets.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "dr-compact", "partition": 0, "offset": 0},
            {"topic": "dr", "partition": 1, "offset": 3}]}))
        mixed = databus("topics", "--delete-records", "--bootstrap-server", broker.bootstrap,
                        "--offset-json-file", str(offsets))
        assert mixed.returncode == 1
        assert "partition: dr-1\tlow_watermark: 10" in mixed.stdout  # never moves back
        assert "partition: dr-compact-0\terror: " in mixed.stdout
        assert "POLICY_VIOLATION" in mixed.stdout
        assert low_watermark(broker.bootstrap, "dr", 0) == 7


def test_offset_json_file_errors_name_the_problem():
    import pytest

    from databus.tools.topics import offsets_from_json

    assert offsets_from_json('{"partitions": [{"topic": "a", "partition": 1, "offset": -1}], '
                             '"version": 1}', "f.json") == {("a", 1): -1}
    for text, problem in [
        ("{", "f.json: not JSON"),
        ('{"version": 1}', 'expected {"partitions"'),
        ('{"partitions": [{"topic": "a", "partition": 0}]}', "partitions[0] needs topic"),
        ('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, '
         '{"topic": "a", "partition": 0, "offset": 2}]}', "a-0 is listed twice"),
    ]:
        with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("{", r"\{")):
            offsets_from_json(text, "f.json")
