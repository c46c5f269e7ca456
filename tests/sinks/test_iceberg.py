"""The iceberg sink with real processes: a ``databus broker``, ``databus sinks`` subprocesses
as users run them, records produced by confluent-kafka, the tables read back with
pyiceberg: every record exactly once (also across kill -9 and a group whose offsets lag the
table's), the offsets in the snapshot summaries, schema evolution, and a refused type change
that stops its table alone."""

from __future__ import annotations

import functools
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import confluent_kafka
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from tests.helpers.broker import BrokerProcess

from .harness import (
    BROKER_OPTIONS,
    ORDER_PROTO,
    Service,
    pb_order,
    produce_json,
    register,
    sinks_config,
    wait_for,
)

N = 20_000
# Short sessions (the broker allows them here): a killed sink's partitions move on quickly.
CONSUMER = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    options = {**BROKER_OPTIONS, "group.min.session.timeout.ms": 1000,
               "schema.registry.listen": "127.0.0.1:0"}
    with BrokerProcess(tmp_path_factory.mktemp("broker"), options=options) as running:
        yield running


@functools.cache
def catalog(path):
    # (the sink's catalog is called databus: a SQL catalog keeps its tables under that name)
    for attempt in range(3):
        try:
            return load_catalog("databus", type="sql", uri=f"sqlite:///{path}/catalog.db",
                                warehouse=f"file://{path}/warehouse")
        except Exception as exc:  # noqa: BLE001
            # pyiceberg creates the catalog's tables when it opens it: racing the sink's
            # first open, the loser's CREATE TABLE fails (the tables are there now)
            if "already exists" not in str(exc) or attempt == 2:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def load(path, name):
    if not (path / "catalog.db").exists():
        return None  # the sink has not opened its catalog yet
    try:
        return catalog(path).load_table(name)
    except NoSuchTableError:
        return None


def scan(path, name) -> pa.Table | None:
    table = load(path, name)
    return None if table is None else table.scan().to_arrow()


def rows(path, name) -> int:
    table = load(path, name)
    snapshot = None if table is None else table.current_snapshot()
    return 0 if snapshot is None else int(snapshot.summary["total-records"])


def iceberg_sink(topics, path, consumer=None, **config) -> dict:
    return {"plugin": "iceberg", "topics": topics, "consumer": consumer or CONSUMER,
            "config": {"path": str(path), "namespace": "db", "commit.interval.ms": 300,
                       **config}}


def summary_offsets(snapshot) -> dict:
    return json.loads(snapshot.summary["databus.offsets"])


def assert_exactly_once(table: pa.Table, topic: str, ids, partitions: int = 4) -> None:
    """Every id once, with its key, in the partition it was produced to, and each
    partition's offsets 0..n-1 each once (no gap, no duplicate)."""
    table = table.filter(pa.compute.equal(table.column("topic"), topic))
    got = table.column("id").to_pylist()
    assert len(got) == len(ids), (len(got), len(ids))
    assert sorted(got) == sorted(ids)
    keys = table.column("key").to_pylist()
    assert all(k == b"%d" % i for k, i in zip(keys, got))
    by_partition: dict[int, list[int]] = {}
    for p, o, i in zip(table.column("partition").to_pylist(),
                       table.column("offset").to_pylist(), got):
        assert p == i % partitions
        by_partition.setdefault(p, []).append(o)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))


def rewind_group(bootstrap: str, group: str, topic: str, partitions: int = 4) -> None:
    """Commit offset 0 for every partition: the group now disagrees with the table."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, 0)
                                 for p in range(partitions)], asynchronous=False)
    finally:
        consumer.close()


def test_records_land_exactly_once_with_offsets_in_the_snapshots_and_resume_from_the_table(
        broker, tmp_path):
    path = tmp_path / "iceberg"
    produce_json(broker.bootstrap, "ice-orders", range(N))
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        "ice-orders": iceberg_sink(["ice-orders"], path)}))
    try:
        service.start()
        wait_for(lambda: rows(path, "db.ice-orders") >= N, "the table", timeout=120,
                 log=service.log)
        assert service.stop() == 0
        table = load(path, "db.ice-orders")
        data = table.scan().to_arrow()
        assert_exactly_once(data, "ice-orders", list(range(N)))
        row = data.filter(pa.compute.equal(data.column("id"), 7)).to_pylist()[0]
        assert row["name"] == "name-7" and row["amount"] == 7 / 4 and row["headers"] == []
        assert str(table.spec().fields[0].transform) == "hour"
        assert [f.name for f in table.schema().fields][:6] == [
            "topic", "partition", "offset", "timestamp", "key", "headers"]
        # Every snapshot holds the offsets it took the table to; they only move forward, and
        # the current one's are the partitions' ends.
        snapshots = table.snapshots()
        assert summary_offsets(table.current_snapshot()) == {
            "ice-orders": {str(p): N // 4 for p in range(4)}}
        seen: dict[str, int] = {}
        for snapshot in snapshots:
            for p, n in summary_offsets(snapshot)["ice-orders"].items():
                assert n >= seen.get(p, 0)
                seen[p] = n
        assert sum(int(s.summary["added-records"]) for s in snapshots) == N

        # The group's committed offsets now lag the table's (as after a kill -9 between the
        # catalog commit and the group's): the sink resumes where the table ends.
        rewind_group(broker.bootstrap, "databus-sink-ice-orders", "ice-orders")
        produce_json(broker.bootstrap, "ice-orders", range(N, N + 4000))
        service.start()
        wait_for(lambda: rows(path, "db.ice-orders") >= N + 4000, "the new records",
                 timeout=120, log=service.log)
        assert service.stop() == 0
        assert_exactly_once(scan(path, "db.ice-orders"), "ice-orders", list(range(N + 4000)))
        assert "where table db.ice-orders's snapshots end" in service.log()
    finally:
        service.close()


def referenced_data_files(table) -> set[str]:
    return {task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()}


def data_files_on_disk(path) -> set[str]:
    out = set()
    for folder, _dirs, names in os.walk(path / "warehouse"):
        out.update(os.path.join(folder, n) for n in names
                   if n.endswith(".parquet") and os.sep + "data" + os.sep in folder + os.sep)
    return out


def test_kill_9_of_the_sink_in_a_loop_while_producing_leaves_every_record_once(
        broker, tmp_path):
    cycles = int(os.environ.get("DATABUS_ICEBERG_KILL_CYCLES", "5"))
    path = tmp_path / "iceberg"
    # Commits every 100 ms, so the kills land before, in and after commits.
    consumer = CONSUMER
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        "ice-kill": iceberg_sink(["ice-kill"], path, consumer,
                                 **{"commit.interval.ms": 100})}))
    produced = [0]
    stop = threading.Event()

    def producer():
        # One producer, some hundred records a second: the sink commits all the time, and
        # (on a busy machine too) catches up at the end.
        out = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                        "enable.idempotence": True, "linger.ms": 20})
        while not stop.is_set():
            first = produced[0]
            for i in range(first, first + 250):
                out.produce("ice-kill", json.dumps(
                    {"id": i, "name": f"name-{i}", "amount": i / 4}).encode(),
                    key=b"%d" % i, partition=i % 4)
            assert out.flush(60) == 0
            produced[0] = first + 250
            time.sleep(0.4)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    rng = random.Random(39)
    try:
        for _ in range(cycles):
            before = rows(path, "db.ice-kill")
            service.start()
            # This run commits something of its own, then dies at a random moment.
            wait_for(lambda before=before: rows(path, "db.ice-kill") > before,
                     "a commit", timeout=60, log=service.log)
            time.sleep(rng.uniform(0, 1.0))
            service.kill9()
        stop.set()
        thread.join(60)
        total = produced[0]
        service.start()
        while (done := rows(path, "db.ice-kill")) < total:  # as long as it moves on
            wait_for(lambda done=done: rows(path, "db.ice-kill") > done, "progress",
                     timeout=120, log=service.log)
        assert service.stop() == 0
    finally:
        stop.set()
        service.close()
    table = load(path, "db.ice-kill")
    assert_exactly_once(table.scan().to_arrow(), "ice-kill", list(range(total)))
    # The files of the commits the kills cut short are gone: every data file is the table's.
    assert data_files_on_disk(path) == referenced_data_files(table)


def test_a_new_field_mid_stream_reads_null_in_old_rows(broker, tmp_path):
    path = tmp_path / "iceberg"
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        "ice-evolve": iceberg_sink(["ice-evolve"], path)}))
    try:
        service.start()
        produce_json(broker.bootstrap, "ice-evolve", range(100))
        wait_for(lambda: rows(path, "db.ice-evolve") >= 100, "the first records",
                 log=service.log)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(100, 200):
            producer.produce("ice-evolve", json.dumps(
                {"id": i, "name": f"name-{i}", "amount": i / 4, "color": f"c{i}"}).encode(),
                key=b"%d" % i, partition=i % 4)
        assert producer.flush(30) == 0
        wait_for(lambda: rows(path, "db.ice-evolve") >= 200, "the new records",
                 log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    table = load(path, "db.ice-evolve")
    assert table.schema().find_field("color").optional
    data = table.scan().to_arrow()
    assert_exactly_once(data, "ice-evolve", list(range(200)))
    colors = dict(zip(data.column("id").to_pylist(), data.column("color").to_pylist()))
    assert all(colors[i] is None for i in range(100))
    assert all(colors[i] == f"c{i}" for i in range(100, 200))


def test_an_int_column_is_promoted_and_a_refused_change_stops_only_its_table(
        broker, tmp_path):
    path = tmp_path / "iceberg"
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

    def send(topic, i, doc):
        producer.produce(topic, json.dumps({"id": i, **doc}).encode(), key=b"%d" % i,
                         partition=i % 4)

    service = Service(tmp_path, "sinks", sinks_config(broker, {
        # one sink, two tables: a refused change in one leaves the other flowing
        "ice-two": iceberg_sink(["ice-good", "ice-bad"], path,
                                schema={"id": "int64", "qty": "int32", "amount": "double"}),
    }))
    try:
        service.start()
        for i in range(40):
            send("ice-good", i, {"qty": i, "amount": i / 2})
            send("ice-bad", i, {"qty": i, "amount": i / 2})
        assert producer.flush(30) == 0
        wait_for(lambda: rows(path, "db.ice-good") >= 40 and rows(path, "db.ice-bad") >= 40,
                 "the first records", log=service.log)
        assert str(load(path, "db.ice-good").schema().find_field("qty").field_type) == "int"
        # qty outgrows int: promoted to long (Iceberg allows it); amount turns into a
        # string in ice-bad: refused, that table stops.
        for i in range(40, 80):
            send("ice-good", i, {"qty": i << 33, "amount": i / 2})
            send("ice-bad", i, {"qty": i, "amount": f"{i / 2} EUR"})
        assert producer.flush(30) == 0
        wait_for(lambda: "table db.ice-bad is stopped: field 'amount'" in service.log(),
                 "the refusal", log=service.log)
        wait_for(lambda: rows(path, "db.ice-good") >= 80, "ice-good", log=service.log)
        for i in range(80, 120):  # the other table keeps flowing
            send("ice-good", i, {"qty": i, "amount": i / 2})
        assert producer.flush(30) == 0
        wait_for(lambda: rows(path, "db.ice-good") >= 120, "ice-good after the refusal",
                 log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    assert "the table has double, the records have string" in service.log()
    good = load(path, "db.ice-good")
    assert str(good.schema().find_field("qty").field_type) == "long"
    data = good.scan().to_arrow()
    assert_exactly_once(data, "ice-good", list(range(120)))
    qty = dict(zip(data.column("id").to_pylist(), data.column("qty").to_pylist()))
    assert qty[5] == 5 and qty[50] == 50 << 33
    # Nothing lost: ice-bad holds the records before the change, and its offsets (and the
    # group's) stop there, so the rest stays in Kafka for when the table is fixed.
    bad = load(path, "db.ice-bad")
    assert_exactly_once(bad.scan().to_arrow(), "ice-bad", list(range(40)))
    assert summary_offsets(bad.current_snapshot()) == {
        "ice-bad": {str(p): 10 for p in range(4)}}
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "databus-sink-ice-two"})
    try:
        committed = consumer.committed([confluent_kafka.TopicPartition("ice-bad", p)
                                        for p in range(4)], timeout=10)
    finally:
        consumer.close()
    assert all(tp.offset <= 10 for tp in committed)


def order_schema(*extra: dict, qty: str = "int", item: str = "string") -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": item},
        {"name": "qty", "type": qty},
        {"name": "price", "type": ["null", "double"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        *extra]})


def produce_avro(broker, topic: str, schema: str, values: list[dict], raw=()) -> None:
    """confluent-kafka's AvroSerializer against the broker's registry (it registers the
    schema as a new version of ``{topic}-value``), id i on partition i % 4."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": broker.schema_registry_url}),
                               schema)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, serialize(value, SerializationContext(topic, MessageField.VALUE)),
                         key=b"%d" % value["id"], partition=value["id"] % 4)
    for i, value in raw:
        producer.produce(topic, value, key=b"%d" % i, partition=i % 4)
    assert producer.flush(30) == 0


def set_compatibility(broker, subject: str, level: str) -> None:
    import urllib.request

    request = urllib.request.Request(
        f"{broker.schema_registry_url}/config/{subject}", method="PUT",
        data=json.dumps({"compatibility": level}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def group_offsets(broker, group: str, topic: str) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(4)], timeout=10)]
    finally:
        consumer.close()


def test_avro_via_the_registry_creates_the_table_from_the_subject_and_follows_its_versions(
        broker, tmp_path):
    """format: avro: the table's columns are the subject's (typed by it, not guessed); a new
    version adding an optional field and widening int -> long evolves the table (old rows
    read the field as null); an incompatible version stops that table with the named error
    and commits nothing past it, while the sink's other table goes on."""
    path = tmp_path / "iceberg"
    orders, other = "ice-avro", "ice-avro-other"
    v1 = [{"id": i, "item": f"item-{i}", "qty": i, "price": None if i % 3 else i * 1.5,
           "at": 1_700_000_000_000 + i} for i in range(40)]
    produce_avro(broker, orders, order_schema(), v1, raw=[(40, b'{"id": 40}')])
    produce_avro(broker, other, order_schema(), v1[:20])
    service = Service(tmp_path, "sinks", sinks_config(broker, {"ice-avro": iceberg_sink(
        [orders, other], path, format="avro",
        **{"schema.registry.url": broker.schema_registry_url})}))
    try:
        service.start()
        wait_for(lambda: rows(path, f"db.{orders}") >= 40 and rows(path, f"db.{other}") >= 20,
                 "the first version's records", log=service.log)
        table = load(path, f"db.{orders}")
        assert {f.name: str(f.field_type) for f in table.schema().fields[6:]} == {
            "id": "long", "item": "string", "qty": "int", "price": "double",
            "at": "timestamptz"}
        # version 2: a new optional field, and qty int -> long (Avro and Iceberg allow both)
        coupon = {"name": "coupon", "type": ["null", "string"], "default": None}
        v2 = [{**v, "id": 41 + i, "qty": (41 + i) << 33, "coupon": f"c{i}" if i % 2 else None}
              for i, v in enumerate(v1[:39])]
        produce_avro(broker, orders, order_schema(coupon, qty="long"), v2)
        wait_for(lambda: rows(path, f"db.{orders}") >= 79, "the second version's records",
                 log=service.log)
        # version 3 turns item into a long: refused (compatibility NONE lets it register)
        set_compatibility(broker, f"{orders}-value", "NONE")
        v3 = [{**v, "id": 80 + i, "item": i, "coupon": None} for i, v in enumerate(v1[:8])]
        produce_avro(broker, orders, order_schema(coupon, qty="long", item="long"), v3)
        wait_for(lambda: "IncompatibleSchemaError" in service.log(), "the named error",
                 log=service.log)
        produce_avro(broker, other, order_schema(), v1[20:])  # the other table goes on
        wait_for(lambda: rows(path, f"db.{other}") >= 40, "the other table",
                 log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    log = service.log()
    assert f"table db.{orders} is stopped: IncompatibleSchemaError: subject {orders}-value " \
        "version 3 cannot follow version 2" in log
    assert "field item changed from string to int64" in log
    table = load(path, f"db.{orders}")
    assert {f.name: str(f.field_type) for f in table.schema().fields[6:]} == {
        "id": "long", "item": "string", "qty": "long", "price": "double",
        "at": "timestamptz", "coupon": "string"}
    data = table.scan().to_arrow()
    # every v1 and v2 record once; the one not in the wire format (id 40) dead-lettered
    ids = sorted(data.column("id").to_pylist())
    assert ids == [i for i in range(80) if i != 40]
    by_id = {r["id"]: r for r in data.select(["id", "qty", "price", "coupon", "at"]).to_pylist()}
    assert by_id[3]["coupon"] is None and by_id[3]["price"] == 4.5 and by_id[3]["qty"] == 3
    assert by_id[42]["coupon"] == "c1" and by_id[42]["qty"] == 42 << 33
    assert by_id[7]["at"].timestamp() == 1_700_000_000.007
    # nothing past the refused version is committed: the table's offsets and the group's
    # stop at the v3 records (which follow the 80 earlier records, 20 per partition)
    assert summary_offsets(table.current_snapshot()) == {orders: {str(p): 20 for p in range(4)}}
    assert all(offset <= 20 for offset in group_offsets(broker, "databus-sink-ice-avro", orders))
    assert_exactly_once(load(path, f"db.{other}").scan().to_arrow(), other, list(range(40)))


def test_protobuf_via_the_registry_gives_typed_columns_and_follows_a_new_field(
        broker, tmp_path):
    """format: protobuf: the .proto text of the subject (confluent-kafka's Python
    ProtobufSerializer registers a binary descriptor this registry does not take, so the
    records are encoded by hand in Confluent's wire format): its first message's fields are
    the columns (enums as names, nested messages as structs, repeated as lists); a version
    adding a proto3 optional field adds the column, earlier rows null."""
    path = tmp_path / "iceberg"
    topic = "ice-proto"
    v1 = register(broker, f"{topic}-value", ORDER_PROTO % "", "PROTOBUF")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic, pb_order(v1, i, f"item-{i}", tags=["a"] * (i % 3),
                                         color=i % 2, line=i if i % 4 else None),
                         key=b"%d" % i, partition=i % 4)
    assert producer.flush(30) == 0
    service = Service(tmp_path, "sinks", sinks_config(broker, {topic: iceberg_sink(
        [topic], path, format="protobuf",
        **{"schema.registry.url": broker.schema_registry_url})}))
    try:
        service.start()
        wait_for(lambda: rows(path, f"db.{topic}") >= 20, "the first records",
                 log=service.log)
        v2 = register(broker, f"{topic}-value",
                      ORDER_PROTO % "\n  optional string coupon = 6;", "PROTOBUF")
        for i in range(20, 40):
            producer.produce(topic, pb_order(v2, i, f"item-{i}", coupon=f"c{i}"),
                             key=b"%d" % i, partition=i % 4)
        assert producer.flush(30) == 0
        wait_for(lambda: rows(path, f"db.{topic}") >= 40, "the second version's records",
                 log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    table = load(path, f"db.{topic}")
    assert {f.name: re.sub(r"\d+: ", "", str(f.field_type))  # (without the field ids)
            for f in table.schema().fields[6:]} == {
        "id": "long", "item": "string", "tags": "list<string>", "color": "string",
        "line": "struct<n: optional int>", "coupon": "string"}
    data = table.scan().to_arrow()
    assert_exactly_once(data, topic, list(range(40)))
    by_id = {r["id"]: r for r in data.select(["id", "tags", "color", "line", "coupon"])
             .to_pylist()}
    assert by_id[5] == {"id": 5, "tags": ["a", "a"], "color": "BLUE", "line": {"n": 5},
                        "coupon": None}
    assert by_id[8]["line"] is None and by_id[8]["color"] == "RED"
    assert by_id[25]["coupon"] == "c25"


def test_registry_format_options_are_checked():
    from databus_plugins.iceberg.options import parse_options

    with pytest.raises(ValueError, match="format avro reads the table's columns from a "
                                         "schema registry: set schema.registry.url"):
        parse_options({"format": "avro"})
    assert parse_options({"format": "avro"}, "http://127.0.0.1:8081/").registry_url == \
        "http://127.0.0.1:8081"
    assert parse_options({"format": "json"}, "http://127.0.0.1:8081").registry_url is None
    assert parse_options({"format": "avro"}, reading=True).registry_url is None  # readers
    with pytest.raises(ValueError, match="schema.registry.url applies to the registry formats"):
        parse_options({"format": "json", "schema.registry.url": "http://127.0.0.1:8081"})
    with pytest.raises(ValueError, match="schema does not apply to format json_sr"):
        parse_options({"format": "json_sr", "schema": {"id": "int64"},
                       "schema.registry.url": "http://127.0.0.1:8081"})


def test_iceberg_show_compact_and_expire_keep_the_records_and_the_offsets(broker, tmp_path):
    path = tmp_path / "iceberg"
    config = sinks_config(broker, {"ice-care": iceberg_sink(["ice-care"], path)})
    service = Service(tmp_path, "sinks", config)
    try:
        service.start()
        for start in range(0, 400, 100):  # a few commits, so a few small files
            produce_json(broker.bootstrap, "ice-care", range(start, start + 100))
            wait_for(lambda start=start: rows(path, "db.ice-care") >= start + 100,
                     "a commit", log=service.log)
        assert service.stop() == 0
        before = load(path, "db.ice-care")
        files_before = len(referenced_data_files(before))
        assert files_before > 4

        def cli(*args):
            done = subprocess.run(
                [sys.executable, "-m", "databus.cli", "iceberg", *args, "-c",
                 str(service.path)], capture_output=True, text=True, timeout=120,
                env={**os.environ, "COLUMNS": "200"})
            assert done.returncode == 0, done.stderr
            return done.stdout

        shown = cli("show")
        assert "db.ice-care" in shown and "hour(timestamp)" in shown
        assert "resumes at: ice-care-0:100, ice-care-1:100, ice-care-2:100, ice-care-3:100" \
            in shown
        assert "rewrote" in cli("compact", "db.ice-care")
        assert "expired" in cli("expire", "--older-than", "PT0S", "--retain-last", "1")
        after = load(path, "db.ice-care")
        assert len(after.snapshots()) == 1
        # one file per Iceberg partition (hour) at most: here one hour, perhaps two
        assert len(referenced_data_files(after)) < files_before
        assert data_files_on_disk(path) == referenced_data_files(after)
        assert_exactly_once(after.scan().to_arrow(), "ice-care", list(range(400)))
        # The compaction's snapshot carries the offsets: a restart goes on from them.
        produce_json(broker.bootstrap, "ice-care", range(400, 500))
        service.start()
        wait_for(lambda: rows(path, "db.ice-care") >= 500, "the new records",
                 log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    assert_exactly_once(scan(path, "db.ice-care"), "ice-care", list(range(500)))


# -- faults: the catalog down, the disk full -------------------------------------------------

def metadata_location(path, name: str, connection=None) -> str:
    """The table's current metadata file, read from the SQLite catalog itself (also through
    the connection that holds it locked)."""
    import sqlite3

    db = connection or sqlite3.connect(path / "catalog.db")
    try:
        namespace, table = name.split(".")
        [(location,)] = db.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND "
            "table_name = ?", (namespace, table)).fetchall()
        return location
    finally:
        if connection is None:
            db.close()


def test_a_locked_catalog_holds_commits_back_until_it_is_free_then_nothing_is_lost(
        broker, tmp_path):
    """The SQLite catalog locked by another process (as by a long writer, or a reader's tool
    left in a transaction): commits fail with the reason logged and are retried with a
    backoff; nothing is committed, to the table or to the group, until the lock goes; then
    every record is in the table once."""
    import sqlite3

    path = tmp_path / "iceberg"
    topic = "ice-locked"
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        topic: iceberg_sink([topic], path)}))
    try:
        service.start()
        produce_json(broker.bootstrap, topic, range(200))
        wait_for(lambda: rows(path, f"db.{topic}") >= 200, "the first records",
                 log=service.log)
        wait_for(lambda: group_offsets(broker, f"databus-sink-{topic}", topic) == [50] * 4,
                 "the group's commit", log=service.log)
        lock = sqlite3.connect(path / "catalog.db", isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            before = metadata_location(path, f"db.{topic}", lock)
            produce_json(broker.bootstrap, topic, range(200, 400))
            wait_for(lambda: "database is locked" in service.log(), "a failed commit",
                     log=service.log)
            assert f"table db.{topic}: commit failed (OperationalError" in service.log()
            # (readers are not held up by a writer: the catalog is in WAL mode)
            assert metadata_location(path, f"db.{topic}") == before
            assert group_offsets(broker, f"databus-sink-{topic}", topic) == [50] * 4
        finally:
            lock.close()
        wait_for(lambda: rows(path, f"db.{topic}") >= 400, "the records after the lock",
                 log=service.log)
        assert f"table db.{topic}: committed again after" in service.log()
        wait_for(lambda: group_offsets(broker, f"databus-sink-{topic}", topic) == [100] * 4,
                 "the group's commit after the lock", log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    assert_exactly_once(scan(path, f"db.{topic}"), topic, list(range(400)))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a disk that fills "
                    "up) needs root; CI runs as root")
def test_a_full_disk_commits_nothing_partial_and_recovers_when_space_returns(broker, tmp_path):
    """The warehouse and the catalog on a 24 MiB tmpfs, filled up: commits fail with ENOSPC,
    named in the log; the table and the group stay at the last full commit; when space
    returns the records land once and the failed attempts' files are gone."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], check=True)
    path = disk / "iceberg"
    topic = "ice-full"
    service = Service(tmp_path, "sinks", sinks_config(broker, {
        topic: iceberg_sink([topic], path)}))
    try:
        service.start()
        produce_json(broker.bootstrap, topic, range(400))
        wait_for(lambda: rows(path, f"db.{topic}") >= 400, "the first records",
                 log=service.log)
        wait_for(lambda: group_offsets(broker, f"databus-sink-{topic}", topic) == [100] * 4,
                 "the group's commit", log=service.log)
        before = metadata_location(path, f"db.{topic}")
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as f:  # every byte the tmpfs has left
            try:  # (unbuffered: nothing left to write when the file is closed)
                while f.write(b"\0" * 65536):
                    pass
            except OSError:
                pass
        produce_json(broker.bootstrap, topic, range(400, 2400))
        wait_for(lambda: "No space left on device" in service.log()
                 or "database or disk is full" in service.log(), "a failed commit",
                 log=service.log)
        assert f"table db.{topic}: commit failed" in service.log()
        assert metadata_location(path, f"db.{topic}") == before
        assert rows(path, f"db.{topic}") == 400
        assert group_offsets(broker, f"databus-sink-{topic}", topic) == [100] * 4
        filler.unlink()  # space returns
        wait_for(lambda: rows(path, f"db.{topic}") >= 2400, "the records after the disk "
                 "had room again", log=service.log)
        wait_for(lambda: group_offsets(broker, f"databus-sink-{topic}", topic) == [600] * 4,
                 "the group's commit after", log=service.log)
        assert service.stop() == 0
        table = load(path, f"db.{topic}")
        assert_exactly_once(table.scan().to_arrow(), topic, list(range(2400)))
        # nothing of the failed attempts stays behind: every data file is the table's
        assert data_files_on_disk(path) == referenced_data_files(table)
    finally:
        service.close()
        catalog.cache_clear()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_an_unreachable_rest_catalog_is_named_and_retried_and_nothing_is_committed(
        broker, tmp_path):
    """A REST catalog that does not answer: the sink names it in the log and retries with
    the runtime's backoff; the group's offsets do not move, so nothing is lost.  (No REST
    catalog server installs here from PyPI, npm or Debian: docs/iceberg.md.)"""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    topic = "ice-rest"
    produce_json(broker.bootstrap, topic, range(40))
    service = Service(tmp_path, "sinks", sinks_config(broker, {topic: iceberg_sink(
        [topic], tmp_path / "unused",
        catalog={"type": "rest", "uri": f"http://127.0.0.1:{port}",
                 "credential": "client:secret", "warehouse": "wh"})}))
    try:
        service.start()
        named = f"db.{topic}: the rest catalog http://127.0.0.1:{port} is unavailable"
        wait_for(lambda: service.log().count(named) >= 2, "the catalog named, and retried",
                 log=service.log)
        assert "Connection refused" in service.log()
        assert "restarting from the committed offsets" in service.log()
        assert "secret" not in service.log()
        assert service.process.poll() is None
        assert group_offsets(broker, f"databus-sink-{topic}", topic) == [-1001] * 4
        assert service.stop() == 0
    finally:
        service.close()


def test_catalog_options_are_checked():
    from databus_plugins.iceberg.options import parse_options

    with pytest.raises(ValueError, match="catalog.uri is required for a rest catalog"):
        parse_options({"catalog": {"type": "rest"}})
    with pytest.raises(ValueError, match="catalog.type must be sql or rest, got 'glue'"):
        parse_options({"catalog": {"type": "glue", "uri": "x"}})
    rest = parse_options({"catalog": {"type": "rest", "uri": "https://cat.example/api",
                                      "credential": "id:secret", "warehouse": "lake",
                                      "s3.endpoint": "http://127.0.0.1:9000"}})
    assert rest.catalog == {"type": "rest", "uri": "https://cat.example/api",
                            "credential": "id:secret", "warehouse": "lake",
                            "s3.endpoint": "http://127.0.0.1:9000"}


def test_the_console_shows_each_table_with_its_last_snapshot_offsets_and_lag(broker, tmp_path):
    """The console's status page (ConfigStatus, as `databus console -c` and `databus up`
    serve it) lists the sink's table: its current snapshot, records, the offsets its
    snapshots hold, and the lag — the partitions' ends less those offsets."""
    import trio

    from databus.config import parse_config
    from databus.console.cluster import ClusterView
    from databus.console.server import ConfigStatus

    path = tmp_path / "iceberg"
    topic = "ice-console"
    config = sinks_config(broker, {topic: iceberg_sink([topic], path)})
    service = Service(tmp_path, "sinks", config)
    try:
        service.start()
        produce_json(broker.bootstrap, topic, range(100))
        wait_for(lambda: rows(path, f"db.{topic}") >= 100, "the records", log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    produce_json(broker.bootstrap, topic, range(100, 108))  # not taken: the lag
    status = ConfigStatus(parse_config(config), broker.bootstrap)
    tables = {t["id"]: t for t in trio.run(status.tables, ClusterView(broker.bootstrap, {}))}
    [row] = tables["sink-tables"]["rows"]
    snapshot = load(path, f"db.{topic}").current_snapshot()
    assert row[:3] == [topic, f"db.{topic}", snapshot.snapshot_id]
    assert row[4:] == [100, ", ".join(f"{topic}-{p}:25" for p in range(4)), 8]
    assert tables["sink-tables"]["columns"] == (
        "sink", "table", "last snapshot", "committed", "records", "offsets", "lag")


def test_processes_opening_a_new_sqlite_catalog_at_once_all_get_it(tmp_path):
    """A second sink, `databus iceberg` or the console opening the catalog while the first
    sink creates it: pyiceberg's table creation is not safe against that (the loser's
    CREATE TABLE fails); open_catalog takes the tables the other made."""
    from databus_plugins.iceberg.options import default_catalog
    from databus_plugins.iceberg.tables import open_catalog

    def opener(_):
        ready.wait()
        return open_catalog(default_catalog(str(tmp_path / "iceberg")))

    ready = threading.Event()
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(opener, i) for i in range(8)]
        ready.set()
        catalogs = [f.result() for f in futures]
    assert all(c.list_namespaces() == [] for c in catalogs)
