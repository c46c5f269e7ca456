"""An index over values in Confluent's wire format (``format: registry``): records written by
confluent-kafka's AvroSerializer are decoded with the schema their id names, Avro's logical
types indexed as text; a value not in the wire format counts undecodable; a field the
subject lacks is said in the log."""

from __future__ import annotations

import datetime
import json

import confluent_kafka
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from databus_plugins.index.store import IndexStore

from tests.helpers.broker import BrokerProcess

from .harness import BROKER_OPTIONS, CONSUMER, Service, sinks_config, wait_for

N = 60
ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "user_id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "address", "type": ["null", {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"}]}], "default": None}]}
T0 = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)


def test_wire_format_values_are_indexed_by_their_schema(tmp_path):
    with BrokerProcess(tmp_path / "broker", {**BROKER_OPTIONS, "num.partitions": 1,
                                             "schema.registry.listen": "127.0.0.1:0"}) as broker:
        registry = broker.schema_registry_url
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry}), json.dumps(ORDER))
        ctx = SerializationContext("idx-avro", MessageField.VALUE)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(N):
            value = {"user_id": i % 7, "at": T0 + datetime.timedelta(seconds=i),
                     "address": {"city": f"c{i % 3}"} if i % 2 else None}
            producer.produce("idx-avro", serialize(value, ctx))
        producer.produce("idx-avro", b'{"user_id": 1}')  # not in the wire format
        assert producer.flush(30) == 0
        config = sinks_config(broker, {})
        config["indexes"] = {"orders": {
            "topics": ["idx-avro"], "path": str(tmp_path / "idx"), "consumer": CONSUMER,
            "format": "registry", "schema.registry.url": registry,
            "fields": {"user_id": "value.user_id", "at": "value.at",
                       "city": "value.address.city", "ghost": "value.ghost"}}}
        service = Service(tmp_path, "sinks", config)
        db = tmp_path / "idx" / "orders.db"

        def indexed() -> bool:
            try:
                store = IndexStore(str(db), readonly=True)
            except FileNotFoundError:
                return False
            try:
                return sum(store.offsets().values()) == N + 1
            finally:
                store.close()
        try:
            service.start()
            wait_for(indexed, "the index", timeout=120, log=service.log)
            log = service.log()
            assert service.stop() == 0
        finally:
            service.close()
    assert ("index orders: field ghost (value.ghost) is not in subject idx-avro-value "
            "version 1") in log
    store = IndexStore(str(db), readonly=True)
    rows = store.db.execute(
        'SELECT f.name, e."offset", e.value FROM entries e JOIN fields f ON f.id = e.field '
        'ORDER BY 1, 2').fetchall()
    skipped = store.skipped()
    store.close()
    by_field: dict[str, list] = {}
    for field, offset, value in rows:
        by_field.setdefault(field, []).append((offset, value))
    assert by_field["user_id"] == [(i, str(i % 7)) for i in range(N)]
    assert by_field["at"] == [(i, (T0 + datetime.timedelta(seconds=i)).isoformat())
                              for i in range(N)]
    assert by_field["city"] == [(i, f"c{i % 3}") for i in range(N) if i % 2]
    assert "ghost" not in by_field
    assert skipped == {("user_id", "undecodable"): 1, ("at", "undecodable"): 1,
                       ("city", "undecodable"): 1, ("ghost", "undecodable"): 1,
                       ("city", "missing"): N // 2, ("ghost", "missing"): N}
