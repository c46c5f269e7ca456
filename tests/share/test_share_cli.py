"""``databus groups`` on a share group, with kafka-share-groups.sh's views, against a broker
process and a confluent-kafka ShareConsumer."""

from __future__ import annotations

import confluent_kafka

from databus.broker.process import BrokerProcess
from databus.cli import main

TOPIC, GROUP = "jobs", "workers"


def test_share_group_list_describe_reset_delete(tmp_path, capsys):
    with BrokerProcess(tmp_path) as broker:
        def groups(*args) -> int:
            return main(["groups", "--bootstrap", broker.bootstrap, "--timeout", "20", *args])

        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(TOPIC, b"before")  # creates the topic; the group starts after it
        producer.flush(10)
        consumer = confluent_kafka.ShareConsumer({
            "bootstrap.servers": broker.bootstrap, "group.id": GROUP,
            "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([TOPIC])
        for _ in range(3):
            assert not consumer.poll(0.5)
        for _ in range(5):
            producer.produce(TOPIC, b"job")
        producer.flush(10)
        got = 0
        while got < 5:
            for message in consumer.poll(1.0):
                got += 1
                kind = (confluent_kafka.AcknowledgeType.ACCEPT if message.offset() <= 3
                        else confluent_kafka.AcknowledgeType.RELEASE)
                consumer.acknowledge(message, kind)
        consumer.commit_sync(10)
        capsys.readouterr()

        assert groups("list", "--type", "share") == 0
        assert f"{GROUP}         Stable               share           share" in (
            capsys.readouterr().out)
        assert groups("describe", GROUP) == 0
        out = capsys.readouterr().out
        assert "START-OFFSET" in out
        # 1-3 accepted, 4-5 released: the start offset is 4, two records still to do
        assert f"{GROUP}         {TOPIC}            0          4               2" in out
        assert groups("describe", GROUP, "--members") == 0
        assert f"{TOPIC}:0" in capsys.readouterr().out
        assert groups("describe", GROUP, "--state") == 0
        assert "Stable" in capsys.readouterr().out
        # a live group's start offset is not moved
        assert groups("reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest",
                      "--execute") == 1
        assert "inactive" in capsys.readouterr().err
        consumer.close()
        assert groups("reset-offsets", GROUP, "--topic", TOPIC, "--shift-by", "1") == 1
        assert "--shift-by" in capsys.readouterr().err
        assert groups("reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest",
                      "--execute") == 0
        capsys.readouterr()
        assert groups("describe", GROUP) == 0
        assert f"{GROUP}         {TOPIC}            0          0               6" in (
            capsys.readouterr().out)
        assert groups("delete-offsets", GROUP, "--topic", TOPIC) == 0
        assert groups("delete", GROUP) == 0
        capsys.readouterr()
        assert groups("list") == 0
        assert GROUP not in capsys.readouterr().out


def test_bench_share_runs(tmp_path):
    """``databus bench share`` end to end at a tiny size (this checks it works, not speed)."""
    import subprocess
    import sys

    with BrokerProcess(tmp_path) as broker:
        result = subprocess.run(
            [sys.executable, "-m", "databus.cli", "bench", "share", "--bootstrap",
             broker.bootstrap, "--records", "3000"],
            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {line.split()[4]: line.split() for line in result.stdout.splitlines()
            if line.startswith("share group, 3 x ")}
    assert set(rows) == {"confluent-kafka", "databus"}  # both clients' share consumers
    assert all(row[-2] == "0" for row in rows.values())  # no record delivered twice
    assert "share state writes:" in result.stdout
