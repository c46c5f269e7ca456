"""``databus bench schemas``: the schema registry's costs, on a broker started here with
``schema.registry.listen``:

* lookups by id (``GET /schemas/ids/{id}``, what every deserializer does once per id) on one
  keep-alive HTTP connection: p50/p99/max latency over ``--lookups`` requests;
* registrations (``POST /subjects/{s}/versions``, each appended and fsynced): per second;
* produce with broker-side validation on beside off: librdkafka producing the same
  wire-format records (magic byte, id, Avro payload) to a topic with
  ``confluent.value.schema.validation=true`` and to one without, records/s and the ratio;
* typed streams (docs/schemas.md): the SDK sending the same records (dicts, msgpack) through
  a ``databus sidecar`` process to a typed Avro stream (checked and encoded by the sidecar)
  and to an untyped one (the msgpack bytes as they are), records/s and the ratio.

The machine the figures come from matters (docs/benchmarks.md): run it on a quiet one.
"""

from __future__ import annotations

import http.client
import json
import struct
import tempfile
import time


def add_arguments(parser) -> None:
    parser.add_argument("--lookups", type=int, default=5000, help="lookups by id (5000)")
    parser.add_argument("--registrations", type=int, default=300,
                        help="schemas registered (300)")
    parser.add_argument("--num-records", "--records", dest="records", type=int,
                        default=200_000, help="records produced per run (200000)")
    parser.add_argument("--typed-records", type=int, default=50_000,
                        help="records sent per stream through the sidecar (50000)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _produce_rate(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.size": 65536, "acks": "all"})
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    started = time.perf_counter()
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    seconds = time.perf_counter() - started
    if failed:
        raise SystemExit(f"bench schemas: {len(failed)} records failed on {topic}: {failed[0]}")
    return len(values) / seconds


def run(args) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    from databus.broker.process import BrokerProcess

    figures: dict = {}
    with tempfile.TemporaryDirectory() as root, BrokerProcess(
            root, {"schema.registry.listen": "127.0.0.1:0"}) as broker:
        host, port = broker.schema_registry_url.split("//", 1)[1].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)

        def post(path: str, body: dict) -> dict:
            conn.request("POST", path, json.dumps(body),
                         {"Content-Type": "application/vnd.schemaregistry.v1+json"})
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise SystemExit(f"bench schemas: {path}: {data[:300]!r}")
            return json.loads(data)

        started = time.perf_counter()
        ids = []
        for i in range(args.registrations):
            schema = {"type": "record", "name": f"Bench{i}",
                      "fields": [{"name": "id", "type": "long"},
                                 {"name": "note", "type": "string"}]}
            ids.append(post(f"/subjects/bench-{i}-value/versions",
                            {"schema": json.dumps(schema)})["id"])
        figures["registrations_per_s"] = args.registrations / (time.perf_counter() - started)

        latencies = []
        for i in range(args.lookups):
            started = time.perf_counter()
            conn.request("GET", f"/schemas/ids/{ids[i % len(ids)]}")
            response = conn.getresponse()
            response.read()
            latencies.append((time.perf_counter() - started) * 1000)
        latencies.sort()
        figures["lookup_ms"] = {"p50": _percentile(latencies, 0.5),
                                "p99": _percentile(latencies, 0.99), "max": latencies[-1]}

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = {"bench-validated": {"confluent.value.schema.validation": "true"},
                  "bench-plain": {}}
        for future in admin.create_topics([NewTopic(t, 1, 1, config=c)
                                           for t, c in topics.items()]).values():
            future.result(30)
        post("/subjects/bench-validated-value/versions",
             {"schema": json.dumps({"type": "record", "name": "Bench0",
                                    "fields": [{"name": "id", "type": "long"},
                                               {"name": "note", "type": "string"}]})})
        schema_id = ids[0]
        values = [b"\x00" + struct.pack(">I", schema_id) + b"\x02" + bytes(90)
                  for _ in range(args.records)]
        off = _produce_rate(broker.bootstrap, "bench-plain", values)
        on = _produce_rate(broker.bootstrap, "bench-validated", values)
        figures["produce_rec_per_s"] = {"validation_off": off, "validation_on": on,
                                        "ratio": on / off}
        conn.close()
        figures["typed_stream_rec_per_s"] = _typed_streams(root, broker, args.typed_records)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    lookup = figures["lookup_ms"]
    produce = figures["produce_rec_per_s"]
    print(f"registrations: {figures['registrations_per_s']:.0f}/s "
          f"({args.registrations}, each fsynced)")
    print(f"lookup by id:  p50 {lookup['p50']:.3f} ms  p99 {lookup['p99']:.3f} ms  "
          f"max {lookup['max']:.3f} ms  ({args.lookups} on one connection)")
    print(f"produce:       validation off {produce['validation_off']:,.0f} rec/s, on "
          f"{produce['validation_on']:,.0f} rec/s  (on/off {produce['ratio']:.2f}x, "
          f"{args.records} records of {len(values[0])} bytes)")
    typed = figures["typed_stream_rec_per_s"]
    print(f"sidecar:       untyped stream {typed['untyped']:,.0f} rec/s, typed Avro stream "
          f"{typed['typed']:,.0f} rec/s  (typed/untyped {typed['ratio']:.2f}x, "
          f"{args.typed_records} records each)")
    return 0


TYPED_SCHEMA = {"type": "record", "name": "BenchOrder", "fields": [
    {"name": "order_id", "type": "long"}, {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "note", "type": ["null", "string"],
                                           "default": None}]}


def _typed_streams(root: str, broker, count: int) -> dict:
    """SDK -> sidecar process -> broker, the same records to a typed and an untyped stream."""
    import types

    import msgpack

    from databus import Client

    from .sidecar import sidecar_process

    url = broker.schema_registry_url
    settings = types.SimpleNamespace(acks="all", linger_ms=5)
    streams = {"typed": {"topic": "bench-typed",
                         "schema": {"file": _write_schema(root), "schema.registry.url": url}},
               "untyped": {"topic": "bench-untyped"}}
    records = [{"order_id": i, "customer": f"customer-{i % 1000}", "amount": i * 0.25,
                "note": None if i % 3 else "gift"} for i in range(count)]
    packed = [msgpack.packb(r) for r in records]
    rates = {}
    with sidecar_process(root, broker.bootstrap, settings, streams=streams) as (path, _pid):
        with Client(path) as client:
            for stream, values in (("untyped", packed), ("typed", records),
                                   ("untyped", packed), ("typed", records)):
                client.send(stream, values[0]).result(30)  # topic and schema ready
                send = client.send
                started = time.perf_counter()
                for value in values:
                    send(stream, value)
                client.flush(300)
                rate = len(values) / (time.perf_counter() - started)
                rates[stream] = max(rates.get(stream, 0.0), rate)  # the better of two runs
            if client.statistics().failed:
                raise SystemExit(f"bench schemas: {client.statistics().failed} typed-stream "
                                 "sends failed")
    return {**rates, "ratio": rates["typed"] / rates["untyped"]}


def _write_schema(root: str) -> str:
    import os

    path = os.path.join(root, "bench-order.avsc")
    with open(path, "w") as f:
        json.dump(TYPED_SCHEMA, f)
    return path
