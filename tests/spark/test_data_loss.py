"""Data lost to retention, for real: a broker deleting old segments every 200 ms.  What the
executors' fetch does (no Spark) and what a Spark batch read does, with failOnDataLoss
true (an error naming the offsets) and false (a warning; the rest is read)."""

from __future__ import annotations

import logging
import time

import pytest
from databus_spark import cluster
from databus_spark.options import parse_source_options
from databus_spark.planning import DataLossError, OffsetRange

from databus.broker.process import BrokerProcess

from .kafka_data import produce

TOPIC = "spark-retention"


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory):
    """(broker, earliest, latest): a topic whose first records retention has deleted."""
    from confluent_kafka.admin import AdminClient, NewTopic

    with BrokerProcess(tmp_path_factory.mktemp("retention-broker"),
                       options={"log.retention.check.interval.ms": 200}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={
            "segment.bytes": "4096", "retention.bytes": "8192"})])[TOPIC].result(30)
        for _ in range(6):  # several produce requests: several batches, several segments
            produce(broker.bootstrap, TOPIC, [{"value": b"x" * 200}] * 20)
        latest = 120
        opts = parse_source_options({"kafka.bootstrap.servers": broker.bootstrap,
                                     "subscribe": TOPIC}, streaming=False)
        # Retention may take several checks to get under retention.bytes: wait until the log
        # start has moved and then stayed put for a second (5 checks), so the tests below
        # see the same log start as the fetches they make.
        deadline = time.monotonic() + 60
        earliest, since = 0, time.monotonic()
        while True:
            snap = cluster.snapshot(opts)
            now = snap.earliest[(TOPIC, 0)]
            if now != earliest:
                earliest, since = now, time.monotonic()
            elif earliest > 0 and time.monotonic() - since >= 1.0:
                break
            assert time.monotonic() < deadline, "retention did not settle within 60 s"
            time.sleep(0.2)
        assert snap.latest[(TOPIC, 0)] == latest
        yield broker, earliest, latest


def _fetch(broker, rng, fail):
    config = cluster.consumer_config({})
    offsets = []
    for columns, _types in cluster.fetch_range(broker.bootstrap, config, rng,
                                               fail_on_data_loss=fail, poll_timeout_ms=10_000):
        offsets += columns[0]
    return offsets


def test_fetch_of_deleted_records(trimmed, caplog):
    broker, earliest, latest = trimmed
    rng = OffsetRange(TOPIC, 0, 0, latest)
    with pytest.raises(DataLossError, match=rf"records \[0, {earliest}\) of {TOPIC}-0 are gone"):
        _fetch(broker, rng, fail=True)
    with caplog.at_level(logging.WARNING, logger="databus_spark"):
        assert _fetch(broker, rng, fail=False) == list(range(earliest, latest))
    assert f"records [0, {earliest}) of {TOPIC}-0 are gone" in caplog.text


def test_fetch_past_the_end_of_the_partition(trimmed):
    broker, _earliest, latest = trimmed
    rng = OffsetRange(TOPIC, 0, latest - 2, latest + 5)
    with pytest.raises(DataLossError, match=rf"records \[{latest}, {latest + 5}\) of {TOPIC}-0 "
                                            rf"are gone \(the partition now ends at {latest}\)"):
        _fetch(broker, rng, fail=True)
    assert _fetch(broker, rng, fail=False) == [latest - 2, latest - 1]


def test_batch_read_with_and_without_fail_on_data_loss(spark, trimmed):
    broker, earliest, latest = trimmed

    def read(fail):
        return (spark.read.format("databus").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", TOPIC).option("startingOffsets", f'{{"{TOPIC}": {{"0": 0}}}}')
                .option("failOnDataLoss", fail).load())

    with pytest.raises(Exception, match=rf"records \[0, {earliest}\) of {TOPIC}-0 are gone"):
        read("true").count()
    rows = read("false").select("offset").collect()
    assert sorted(r["offset"] for r in rows) == list(range(earliest, latest))
