"""The pipeline workload's first stage: apps' SDK sends through ``databus up`` (the sidecar
and its built-in broker), read back from the broker by the queue workload's consumers.

``UpProcess`` runs ``databus up -c CONFIG`` as a child with the shape the nemesis drives
(``pid``, ``kill9()``, ``start()``, ``alive()``, ``port``): a fault hits the sidecar
process; killed, it takes its broker child down with it (the broker stops when its
lifeline closes) and both come back on ``start()`` on the same socket, port and data.
``SdkProducer`` sends unique values with ``databus.Client`` to explicit partitions: a
delivery report is ``ok`` with its offset, a SidecarUnavailableError (or any error) is
``info`` (the SDK documents its outcome as unknown).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from .checker import check, format_verdict
from .history import INFO, OK, Op, Read, Write, stage_history
from .workload import _Worker

STREAM = "verify"
SOURCE = "local"  # the source cluster's name: the mirror's target topic is "local.TOPIC"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UpProcess:
    """``databus up`` as a child.  Alone, it runs its built-in broker (a kill -9 of it takes
    the broker down too).  With ``stages`` (``(source, target)``: two clusters'
    bootstrap servers), it runs the sidecar against ``source`` and the later stages in the
    same process, so a kill -9 of it kills them all while the brokers stay up: a mirror of
    the topic to ``target`` (exactly once: the default) and a Parquet sink of the topic
    (``raw`` values, files rolled every second) into ``root/parquet``."""

    def __init__(self, root: Path, sock_dir: Path, topic: str, partitions: int,
                 stages: tuple[str, str] | None = None, mirror_exactly_once: bool = True) -> None:
        self.root = root
        self.external = stages is not None
        self.port = int(stages[0].rsplit(":", 1)[1]) if stages else _free_port()
        self.host = "127.0.0.1"
        self.socket_path = str(sock_dir / "up.sock")
        self.config = root / "sidecar.yaml"
        self.log_path = root / "up.log"
        self.parquet = root / "parquet"
        self.process: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        config: dict = {
            "sidecar": {"socket": self.socket_path, "metrics_listen": None},
            "producer": {"acks": "all", "enable.idempotence": True, "linger.ms": 5},
            "streams": {STREAM: {"topic": topic}},
        }
        if stages is None:
            config["broker"] = {"data_dir": "data", "listen": f"127.0.0.1:{self.port}",
                                "options": {"num.partitions": partitions}}
        else:
            config["clusters"] = {SOURCE: {"bootstrap.servers": stages[0]},
                                  "target": {"bootstrap.servers": stages[1]}}
            config["streams"][STREAM]["cluster"] = SOURCE
            config["mirrors"] = [{"name": "verify", "source": SOURCE, "target": "target",
                                  "topics": [topic], "exactly.once": mirror_exactly_once}]
            config["sinks"] = {"verify-parquet": {
                "plugin": "parquet", "topics": [topic], "cluster": SOURCE,
                "config": {"path": str(self.parquet), "format": "raw", "partition.by": "none",
                           "flush.size": 500, "rotate.schedule.interval.ms": 1000}}}
        self.config.write_text(yaml.safe_dump(config))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 120) -> UpProcess:
        start_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "databus.cli", "up", "-c", str(self.config)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as log:
                log.seek(start_at)
                text = log.read().decode(errors="replace")
            if "databus is up" in text:
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"databus up did not come up:\n{text[-3000:]}")
            time.sleep(0.1)

    def kill9(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        if self.external:
            return
        # its broker child stops cleanly once its lifeline closes: wait until the port is free
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.1)

    def close(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class SdkProducer(_Worker):
    prefix = "sdk"

    def work(self) -> None:
        from databus import Client

        socket_path = self.opts.extra["socket"]
        with Client(socket_path) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                value = f"{self.name}-{n}-{self.rng.randrange(1 << 30):x}"
                partition = self.rng.randrange(self.opts.partitions)
                op_id = self.rec.invoke(self.name, "send", writes=(Write(partition, value),))

                def done(fut, op_id=op_id, partition=partition, value=value):
                    exc = fut.exception()
                    if exc is None:
                        offset = fut.result().offset
                        self.rec.complete(op_id, self.name, OK, "send", writes=(
                            Write(partition, value, offset if offset >= 0 else None),))
                    else:
                        self.rec.complete(op_id, self.name, INFO, "send",
                                          writes=(Write(partition, value),), error=str(exc))

                try:
                    future = client.send(STREAM, value.encode(), partition=partition)
                except Exception as exc:  # refused at once (sidecar away): never sent
                    self.rec.complete(op_id, self.name, INFO, "send",
                                      writes=(Write(partition, value),), error=str(exc))
                    self.stop.wait(0.05)
                    continue
                future.add_done_callback(done)
                self.stop.wait(1.0 / self.opts.rate)
            client.flush(30)


def short_dir() -> Path:
    """A directory for the sidecar's Unix socket (a socket path is limited to ~107 bytes)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="dbv-", dir="/tmp" if os.path.isdir("/tmp") else None))


# -- the later stages: read back and checked ----------------------------------------------------

def mirrored_reads(target: str, topic: str) -> list[Read]:
    """Every record of the mirror's copy of ``topic`` a read_committed reader sees, at its
    target partition and offset (the mirror keeps the source's partitions)."""
    import confluent_kafka

    name = f"{SOURCE}.{topic}"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": target, "group.id": "verify-stage", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        meta = consumer.list_topics(name, timeout=10).topics.get(name)
        if meta is None or meta.error is not None or not meta.partitions:
            return []
        consumer.assign([confluent_kafka.TopicPartition(name, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in meta.partitions])
        out: list[Read] = []
        done: set[int] = set()
        while len(done) < len(meta.partitions):
            msg = consumer.poll(10)
            if msg is None:
                raise RuntimeError(f"reading {name} back timed out")
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise RuntimeError(str(msg.error()))
            out.append(Read(msg.partition(), msg.offset(), msg.value().decode()))
        return out
    finally:
        consumer.close()


def parquet_reads(path: Path) -> list[Read]:
    """Every row of the Parquet sink's files under ``path``: its Kafka partition, its
    position among that partition's rows (files in name order: the sink names them by first
    offset), its value.  The position, not the Kafka offset: a row written twice is then
    two places holding one value, a duplicate."""
    import pyarrow.parquet as pq

    out: list[Read] = []
    position: dict[int, int] = {}
    for file in sorted(path.rglob("*.parquet")):
        table = pq.read_table(file, columns=["partition", "offset", "value"])
        rows = sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist(),
                          table["value"].to_pylist()), key=lambda row: row[:2])
        for partition, _offset, value in rows:
            at = position.get(partition, 0)
            position[partition] = at + 1
            out.append(Read(partition, at, value.decode()))
    return out


def check_stages(up: UpProcess, target: str, topic: str, ops: list[Op],
                 allow: frozenset[str] | set[str], settle: float = 60.0) -> tuple[bool, str]:
    """Wait (up to ``settle`` seconds) for the mirror and the sink to hold every acknowledged
    value, then check each stage's copy with the queue workload's checker (history.
    stage_history); returns (valid, the verdicts to print)."""
    acked = {w.value for op in ops if op.f == "send" and op.type == OK for w in op.writes}
    stages = {"mirror (read_committed on the target)": lambda: mirrored_reads(target, topic),
              "parquet sink (its files)": lambda: parquet_reads(up.parquet)}
    texts, valid = [], True
    for name, read in stages.items():
        deadline = time.monotonic() + settle
        while True:
            held = read()
            if acked <= {r.value for r in held} or time.monotonic() > deadline:
                break
            time.sleep(1)
        verdict = check(stage_history(ops, name.split()[0], held), allow=allow)
        valid = valid and verdict.valid
        texts.append(format_verdict(verdict, header=f"stage {name}: {len(held)} values",
                                    label="stage verdict"))
    texts.append(f"stages: {'VALID' if valid else 'INVALID'}")
    return valid, "\n".join(texts)
