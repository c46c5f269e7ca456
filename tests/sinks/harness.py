"""Real processes for the sinks tests: ``databus sinks`` / ``databus up`` subprocesses with
their config files, JSON records produced with confluent-kafka, and the export read back
with pyarrow."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from functools import partial
from pathlib import Path

import confluent_kafka
import pyarrow as pa
import pyarrow.dataset as ds
import yaml

import tests.helpers.wait

# The sinks tests' predicates read the whole Parquet export or scrape /metrics: five looks a
# second, not ten, leaves the cores to the processes under test.
wait_for = partial(tests.helpers.wait.wait_for, interval=0.2)


class Service:
    """``databus sinks -c FILE`` (or ``databus up -c FILE``) as a user runs it."""

    def __init__(self, tmp: Path, name: str, config: dict, *, command: str = "sinks",
                 args: tuple = (), env: dict | None = None) -> None:
        self.tmp, self.name, self.command, self.args = tmp, name, command, args
        self.path = tmp / f"{name}.yaml"
        self.log_path = tmp / f"{name}.log"
        self.env = env
        self.process: subprocess.Popen | None = None
        self.write_config(config)

    def write_config(self, config: dict) -> None:
        self.path.write_text(yaml.safe_dump(config))

    def start(self, ready: str | None = None) -> Service:
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "databus.cli", self.command, "-c", str(self.path),
                 *self.args],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                env={**os.environ, **(self.env or {})},
            )
        ready = ready or ("databus is up" if self.command == "up" else "databus sinks is up")
        wait_for(lambda: ready in self.log() or self.process.poll() is not None,
                 f"{self.name} to start", timeout=60, log=self.log)
        assert self.process.poll() is None, self.log()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[getattr(self, "_offset", 0):]

    def metrics_url(self) -> str:
        match = re.search(r"http://(\S+?)/metrics", self.log())
        assert match, self.log()
        return f"http://{match.group(1)}"

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url() + "/metrics", timeout=10) as r:
            return r.read().decode()

    def metric(self, name: str, **labels) -> float | None:
        want = {f'{k}="{v}"' for k, v in labels.items()}
        for line in self.metrics().splitlines():
            if line.startswith((name + "{", name + " ")):
                head, _, value = line.rpartition(" ")
                found = set(re.findall(r'\w+="[^"]*"', head))
                if want <= found:
                    return float(value)
        return None

    def reload(self, config: dict) -> None:
        self.write_config(config)
        self.process.send_signal(signal.SIGHUP)

    def stop(self, timeout: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill9(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def produce_json(bootstrap: str, topic: str, ids, *, partitions: int = 4,
                 timestamp=None, raw: dict | None = None) -> None:
    """One JSON record per id, on partition ``id % partitions``; ``raw`` maps an id to bytes
    sent instead (malformed records)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                         "enable.idempotence": True})
    failures = []

    def report(err, _msg):
        if err is not None:
            failures.append(err)

    for i in ids:
        value = (raw or {}).get(i) or json.dumps(
            {"id": i, "name": f"name-{i}", "amount": i / 4}).encode()
        kwargs = {"timestamp": timestamp(i)} if timestamp else {}
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % i, partition=i % partitions,
                                 on_delivery=report, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0 and not failures, failures


def export_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*.parquet") if not p.name.startswith("."))


def read_export(path: Path):
    """The export as docs/parquet.md reads it: the files' schemas merged by name (a column
    that an inferred schema gained later is null in the files written before it)."""
    files = export_files(path)
    if not files:
        return None

    def dataset(schema=None):
        return ds.dataset([str(f) for f in files], schema=schema, format="parquet",
                          partitioning=ds.HivePartitioning.discover(),
                          partition_base_dir=str(path))

    first = dataset()
    merged = pa.unify_schemas([first.schema, *(f.physical_schema for f in first.get_fragments())])
    return dataset(merged).to_table()


def exported_rows(path: Path) -> int:
    table = read_export(path)
    return 0 if table is None else table.num_rows


def assert_exactly_once(path: Path, topic: str, ids) -> object:
    """Every id exported exactly once, in the file of its partition and offset."""
    table = read_export(path)
    assert table is not None, "nothing exported"
    table = table.filter(ds.field("topic") == topic)
    got = table.column("id").to_pylist()
    want = sorted(ids)
    assert len(got) == len(want), (len(got), len(want))
    assert sorted(got) == want
    pairs = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert len(set(pairs)) == len(pairs)
    return table


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def wait_gone(pid: int, timeout: float = 30) -> None:
    def gone():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return True
        return state == "Z"

    wait_for(gone, f"process {pid} to exit", timeout=timeout)


BROKER_OPTIONS = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 0}
# Short sessions so that a killed member's partitions move within seconds.
CONSUMER = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def sinks_config(broker, sinks: dict, **sidecar) -> dict:
    return {
        "clusters": {"main": {"bootstrap.servers": broker.bootstrap}},
        "sidecar": {"metrics_listen": "127.0.0.1:0", "reload_poll_ms": 0, **sidecar},
        "sinks": sinks,
    }


def parquet_sink(topic: str, path: Path, **config) -> dict:
    return {"plugin": "parquet", "topics": [topic], "consumer": CONSUMER,
            "config": {"path": str(path), **config}}


# -- Protobuf values in Confluent's wire format, by hand -----------------------------------

ORDER_PROTO = """syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  Color color = 4;
  Line line = 5;%s
  enum Color { RED = 0; BLUE = 1; }
  message Line { int32 n = 1; }
}
"""


def register(broker, subject: str, schema: str, schema_type: str) -> int:
    """Register ``schema`` under ``subject`` in the broker's registry; its id."""
    request = urllib.request.Request(
        f"{broker.schema_registry_url}/subjects/{subject}/versions", method="POST",
        data=json.dumps({"schema": schema, "schemaType": schema_type}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["id"]


def pb_varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def pb_order(schema_id: int, id_: int, item: str, tags=(), color=0, line=None,
             coupon=None) -> bytes:
    """Confluent's Protobuf wire format, encoded by hand (independent of the sink's reader):
    magic 0, the schema id, message indexes [0] (one 0 byte), then the message."""
    def text(number, value: str) -> bytes:
        data = value.encode()
        return pb_varint(number << 3 | 2) + pb_varint(len(data)) + data

    body = pb_varint(1 << 3) + pb_varint(id_) + text(2, item)
    body += b"".join(text(3, t) for t in tags)
    if color:
        body += pb_varint(4 << 3) + pb_varint(color)
    if line is not None:
        inner = pb_varint(1 << 3) + pb_varint(line)
        body += pb_varint(5 << 3 | 2) + pb_varint(len(inner)) + inner
    if coupon is not None:
        body += text(6, coupon)
    return b"\0" + schema_id.to_bytes(4, "big") + b"\0" + body
