"""The parquet sink with real processes: a ``databus broker``, ``databus sinks`` (and ``databus
up``) subprocesses as users run them, records produced by confluent-kafka, the files read
back with pyarrow: every record exactly once, also across kill -9, rebalances, rolls, Hive
directories and the dead-letter topic."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pyarrow as pa
import pyarrow.parquet as pq

from .harness import (
    BROKER_OPTIONS,
    Service,
    assert_exactly_once,
    children,
    export_files,
    exported_rows,
    parquet_sink,
    produce_json,
    read_export,
    sinks_config,
    wait_for,
    wait_gone,
)

N = 200_000


def test_export_200k_json_records_exactly_once_with_columns_and_types(broker, tmp_path):
    out = tmp_path / "export"
    produce_json(broker.bootstrap, "big", range(N))
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        "big-export": parquet_sink("big", out, **{"flush.size": 25_000})}))
    try:
        service.start()
        # 50 000 records per partition: two full files each, durable without a stop.
        wait_for(lambda: exported_rows(out) >= N, "the export", timeout=300, log=service.log)
        table = assert_exactly_once(out, "big", range(N))
        wait_for(lambda: service.metric("databus_sink_lag", sink="big-export") == 0
                 and service.metric("databus_sink_last_durable_age_seconds",
                                    sink="big-export") == 0, "lag 0", timeout=60)
        metrics = service.metrics()
        assert service.metric("databus_sink_records_in_total", sink="big-export") == N
        assert service.metric("databus_sink_partitions", sink="big-export") == 4
        assert service.metric("databus_sink_running", sink="big-export") == 1
        assert service.metric("databus_sink_errors_total", sink="big-export") == 0
        assert service.stop() == 0
    finally:
        service.close()
    # docs/operations.md lists every sink family /metrics has.
    documented = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    families = set(re.findall(r"^# TYPE (databus_sink\S+)", metrics, re.MULTILINE))
    assert len(families) == 8
    for family in families:
        assert f"`{family}`" in documented or f"`{family}_total`" in documented, family

    assert len(export_files(out)) == 8
    for path in export_files(out):
        _topic, partition, first, last = path.name.removesuffix(".parquet").split("+")
        assert path.parent.parent.parent.name == "topic=big"
        rows = pq.read_table(path)
        assert rows.column("offset").to_pylist() == list(range(int(first), int(last) + 1))
        assert set(rows.column("partition").to_pylist()) == {int(partition)}
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "SNAPPY"
    schema = table.schema
    for name, type_ in [("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC")),
                        ("key", pa.binary()), ("id", pa.int64()), ("name", pa.string()),
                        ("amount", pa.float64())]:
        assert schema.field(name).type == type_, name
    rows = {r["id"]: r for r in table.slice(0, 1000).to_pylist()}
    some = next(iter(rows.values()))
    assert some["key"] == b"%d" % some["id"] and some["partition"] == some["id"] % 4
    assert some["name"] == f"name-{some['id']}" and some["amount"] == some["id"] / 4


def test_kill_9_of_databus_up_three_times_during_the_export_still_exactly_once(tmp_path):
    from tests.sidecar.harness import short_tmpdir

    n, flush_size = 200_000, 500
    # no time rolls and 50 000 records a partition: every file holds flush.size records
    files = n // flush_size
    out = tmp_path / "export"
    with short_tmpdir() as sock_dir:
        config = {
            "sidecar": {"socket": f"{sock_dir}/up.sock", "metrics_listen": None},
            "broker": {"data_dir": "data", "listen": "127.0.0.1:0", "options": BROKER_OPTIONS},
            "streams": {"events": {}},
            # Small files: many rolls (and so many commits) to be killed between.
            "sinks": {"export": parquet_sink("events", out, **{"flush.size": flush_size})},
        }
        up = Service(tmp_path, "up", config, command="up")
        try:
            up.start()
            bootstrap = re.search(r"Kafka listener\s+(\S+:\d+)", up.log()).group(1)
            produce_json(bootstrap, "events", range(n))
            mid_export = []
            for _kill in range(3):
                before = len(export_files(out))
                # Kill as soon as this run has written files of its own: at most what is
                # left (a kill near the end leaves less than 3 files to go).
                wait_for(lambda before=before: len(export_files(out)) >= min(before + 3, files),
                         "export progress", timeout=120, log=up.log)
                brokers = children(up.process.pid)
                up.kill9()
                # Nothing is written after the kill: fewer files than the whole export is a
                # kill mid-export.  A test starved of CPU may kill after the end (the export
                # outran it): such a kill proves nothing, but does no harm either.
                mid_export.append(len(export_files(out)) < files)
                for pid in brokers:  # the broker stops by itself when `up` dies
                    wait_gone(pid)
                up.start()
            # at least the first kill landed mid-export, or this test shows nothing
            assert mid_export[0], f"the export finished before the first kill: {mid_export}"
            wait_for(lambda: len(export_files(out)) >= files, "the export", timeout=300,
                     log=up.log)
            up.process.send_signal(2)  # Ctrl-C: drains, stops the sinks, then the broker
            assert up.process.wait(60) == 0, up.log()
        finally:
            up.close()
    assert_exactly_once(out, "events", range(n))
    # The partitions' files tile their offsets: nothing written twice under two names.
    spans: dict[int, list] = {}
    for path in export_files(out):
        _topic, partition, first, last = path.name.removesuffix(".parquet").split("+")
        spans.setdefault(int(partition), []).append((int(first), int(last)))
    for ranges in spans.values():
        ranges.sort()
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))


def test_two_processes_share_a_sinks_partitions_and_stopping_one_moves_them(broker, tmp_path):
    out = tmp_path / "export"
    config = sinks_config(broker, {"shared": parquet_sink("shared", out, **{"flush.size": 500})})
    a, b = Service(tmp_path, "a", config), Service(tmp_path, "b", config)

    def partitions(service):
        return service.metric("databus_sink_partitions", sink="shared")

    def records_in(service):
        return service.metric("databus_sink_records_in_total", sink="shared")

    try:
        a.start()
        wait_for(lambda: partitions(a) == 4, "a owns the 4 partitions", timeout=60, log=a.log)
        b.start()
        wait_for(lambda: partitions(a) == 2 and partitions(b) == 2, "a 2/2 split", timeout=60,
                 log=b.log)
        produce_json(broker.bootstrap, "shared", range(20_000))
        # 5000 records per partition: ten full files each, durable without a stop.
        wait_for(lambda: exported_rows(out) >= 20_000, "the first half", timeout=120, log=b.log)
        assert records_in(a) == records_in(b) == 10_000  # two partitions each
        assert a.stop() == 0  # flushes, commits, leaves the group: no session timeout
        wait_for(lambda: partitions(b) == 4, "b to take a's partitions", timeout=30, log=b.log)
        produce_json(broker.bootstrap, "shared", range(20_000, 40_000))
        wait_for(lambda: exported_rows(out) >= 40_000, "the second half", timeout=120, log=b.log)
        assert records_in(b) == 30_000
        assert b.stop() == 0
    finally:
        a.close()
        b.close()
    assert_exactly_once(out, "shared", range(40_000))


HOUR = 3_600_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR


def test_rolls_hive_directories_and_the_dead_letter_topic(broker, tmp_path):
    n = 2000
    malformed = {13: b"{broken", 500: b"[1, 2]", 1999: b'{"id": "not a number"}'}
    good = [i for i in range(n) if i not in malformed]
    # 6 s apart: 3.3 hours of record time
    produce_json(broker.bootstrap, "mixed", range(n), timestamp=lambda i: T0 + i * 6000,
                 raw=malformed)
    out = {name: tmp_path / name for name in ("count", "size", "time", "wallclock")}
    schema = {"id": "int64", "name": "string", "amount": "double"}
    sinks = {
        "count": parquet_sink("mixed", out["count"], schema=schema, **{"flush.size": 100}),
        "size": parquet_sink("mixed", out["size"], schema=schema, **{
            "rotate.size.bytes": 3000, "partition.by": "none", "parquet.codec": "zstd"}),
        "time": parquet_sink("mixed", out["time"], schema=schema, **{
            "rotate.interval.ms": 600_000, "partition.by": "day"}),
        "wallclock": parquet_sink("mixed", out["wallclock"], schema=schema, **{
            "rotate.schedule.interval.ms": 1000, "flush.size": 10**9}),
    }
    service = Service(tmp_path, "sinks", sinks_config(broker, sinks))
    try:
        service.start()
        for name in sinks:
            wait_for(lambda name=name: service.metric("databus_sink_records_in_total",
                                                      sink=name) == n,
                     f"{name} to take all", timeout=60, log=service.log)
        # The wall clock rolls the files of a sink whose sizes are never reached.
        wait_for(lambda: exported_rows(out["wallclock"]) == len(good), "wall-clock roll",
                 timeout=30, log=service.log)
        assert service.metric("databus_sink_dead_letters_total", sink="count") == 3
        assert service.stop() == 0
    finally:
        service.close()
    for name in sinks:
        assert_exactly_once(out[name], "mixed", good)

    def size(i):
        return len(b"%d" % i) + len(json.dumps({"id": i, "name": f"name-{i}",
                                                "amount": i / 4}).encode())

    for path in export_files(out["count"]):
        rows = pq.read_table(path)
        assert rows.num_rows <= 100
        hours = {t // HOUR for t in rows.column("timestamp").cast(pa.int64()).to_pylist()}
        assert len(hours) == 1, path
        stamp = hours.pop() * 3600
        day = __import__("datetime").datetime.fromtimestamp(stamp, __import__("datetime").UTC)
        assert path.parent.name == f"hour={day:%H}" and path.parent.parent.name == (
            f"date={day:%Y-%m-%d}")
    assert len({p.parent for p in export_files(out["count"])}) >= 4  # 3.3 hours of records
    for path in export_files(out["size"]):
        assert path.parent.name == "topic=mixed"
        sizes = [size(i) for i in pq.read_table(path).column("id").to_pylist()]
        assert sum(sizes[:-1]) < 3000  # rolled after the record that reached the limit
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    for path in export_files(out["time"]):
        times = pq.read_table(path).column("timestamp").cast(pa.int64()).to_pylist()
        assert max(times) - min(times) < 600_000
        assert path.parent.name.startswith("date=")
    # The malformed records are in each sink's dead-letter topic, with the reason.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "dlq-check", "auto.offset.reset":
                                         "earliest"})
    consumer.subscribe(["count.dlq"])
    dead = {}
    try:
        deadline_polls = 0
        while len(dead) < 3 and deadline_polls < 60:
            deadline_polls += 1
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                dead[int(msg.key())] = (msg.value(), dict(msg.headers()))
    finally:
        consumer.close()
    assert sorted(dead) == sorted(malformed)
    for i, (value, headers) in dead.items():
        assert value == malformed[i]
        assert headers["__connect.errors.topic"] == b"mixed"
        assert headers["__connect.errors.partition"] == str(i % 4).encode()
        assert headers["__connect.errors.exception.message"].startswith(
            b"json value does not decode: ")


def test_sinks_follow_the_lane_policy_main_by_default_one_lane_or_all(broker, tmp_path):
    """docs/lanes.md: a sink of `lanes` reads the main lane by default (even with a regex
    that would match `lanes.lane.fx`), one lane's topics, or every lane's as well."""
    exports = {name: tmp_path / name for name in ("main", "lane", "all")}
    options = {"flush.size": 1, "partition.by": "none"}
    main = parquet_sink("lanes", exports["main"], **options)
    del main["topics"]
    main["topics.regex"] = "lanes.*"
    config = sinks_config(broker, {
        "main": main,
        "lane": {**parquet_sink("lanes", exports["lane"], **options), "lanes": "fx"},
        "all": {**parquet_sink("lanes", exports["all"], **options), "lanes": "all"},
    })
    produce_json(broker.bootstrap, "lanes", [1, 2], partitions=1)
    produce_json(broker.bootstrap, "lanes.lane.fx", [10], partitions=1)
    produce_json(broker.bootstrap, "lanes.lane.other", [20], partitions=1)
    service = Service(tmp_path, "lanes", config)

    def exported(name):
        table = read_export(exports[name])
        return [] if table is None else sorted(zip(table.column("topic").to_pylist(),
                                                   table.column("id").to_pylist()))

    try:
        service.start()
        want = {"main": [("lanes", 1), ("lanes", 2)], "lane": [("lanes.lane.fx", 10)],
                "all": [("lanes", 1), ("lanes", 2), ("lanes.lane.fx", 10),
                        ("lanes.lane.other", 20)]}
        wait_for(lambda: all(exported(name) == rows for name, rows in want.items()),
                 "each sink's lanes exported", timeout=60, log=service.log)
        # What the main sink's group was given: the main topic's partitions, no lane topic.
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
        group = admin.describe_consumer_groups(["databus-sink-main"])["databus-sink-main"]
        (member,) = group.result(timeout=10).members
        assert {tp.topic for tp in member.assignment.topic_partitions} == {"lanes"}
        assert service.stop() == 0
    finally:
        service.close()
    assert {name: exported(name) for name in want} == want


def test_a_field_first_seen_after_the_first_batch_is_exported_not_dropped(broker, tmp_path):
    """No declared schema: the columns come from the first batch, one record without
    `order_id`; then 2 000 records with it.  The field is a column of the files written
    from then on (the first record's row has it null), logged once, and pyarrow.dataset
    reading all the files with their schemas merged by name has every value."""
    out, topic = tmp_path / "export", "evolving"
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        "evolving-export": parquet_sink(topic, out, **{"flush.size": 500})}))
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    try:
        service.start()
        producer.produce(topic, json.dumps({"id": 0, "item": "book"}).encode(), partition=0)
        producer.flush(30)
        wait_for(lambda: service.metric("databus_sink_records_in_total",
                                        sink="evolving-export") == 1, "the first record",
                 timeout=60, log=service.log)
        for i in range(1, 2001):
            producer.produce(topic, json.dumps({"id": i, "item": "book",
                                                "order_id": f"o-{i}"}).encode(), partition=0)
        producer.flush(30)
        wait_for(lambda: service.metric("databus_sink_records_in_total",
                                        sink="evolving-export") == 2001, "the others",
                 timeout=60, log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    table = read_export(out).sort_by("id")
    assert table.column("id").to_pylist() == list(range(2001))
    assert table.column("order_id").to_pylist() == [None] + [f"o-{i}" for i in range(1, 2001)]
    assert service.log().count("new value field(s) order_id (string)") == 1, service.log()
