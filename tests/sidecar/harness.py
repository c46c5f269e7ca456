"""Shared by tests/sidecar and tests/plugins: librdkafka's mock cluster, an in-process
sidecar, a built-in broker subprocess, and a confluent-kafka reader."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from typing import Any

import confluent_kafka
import trio

from databus.config import parse_config
from databus.plugins import get_plugin_manager
from databus.protocol import sidecar_wire as wire
from databus.up.embedded_broker import run_broker_process
from databus.up.host import host_sidecar


@contextlib.contextmanager
def short_tmpdir():
    """A short directory for Unix sockets (their paths are limited to ~107 bytes)."""
    path = tempfile.mkdtemp(prefix="dbs-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sidecar_config(socket_dir: str, clusters: dict | None = None, **sections: Any):
    data: dict[str, Any] = {
        "sidecar": {
            "socket": os.path.join(socket_dir, "s.sock"),
            "metrics_listen": "127.0.0.1:0",
            "reload_poll_ms": 0,
            **sections.pop("sidecar", {}),
        },
        **({"clusters": clusters} if clusters else {}),
        **sections,
    }
    return parse_config(data)


@contextlib.asynccontextmanager
async def running_sidecar(config, *, extra_plugins=(), embedded_bootstrap=None, config_path=None):
    """An in-process sidecar as ``databus up`` runs it (with its sinks and mirrors); yields
    it (``.addresses`` set).  Drains on exit."""
    pm = get_plugin_manager(list(extra_plugins))
    sidecar = host_sidecar(
        config, plugin_manager=pm, embedded_bootstrap=embedded_bootstrap,
        config_path=config_path,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sidecar.serve)
        try:
            yield sidecar
        finally:
            # Drain (serve returns by itself); if the body raised, the nursery cancels it.
            sidecar.request_stop()


@contextlib.asynccontextmanager
async def broker_process(data_dir: str, **options):
    """A real ``databus broker`` subprocess on a free port: yields (bootstrap, process)."""
    from databus.config import EmbeddedBrokerConfig

    config = EmbeddedBrokerConfig(data_dir=data_dir, listen="127.0.0.1:0", options=options)
    async with trio.open_nursery() as nursery:
        host, port, process, _ = await nursery.start(
            lambda task_status: run_broker_process(config, relay=None, task_status=task_status)
        )
        try:
            yield f"{host}:{port}", process
        finally:
            nursery.cancel_scope.cancel()


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0):
    """Read ``expected`` records of ``topic`` from the beginning with confluent-kafka;
    returns them as (partition, offset, key, value, headers) tuples."""
    import time

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{topic}-{os.getpid()}-{time.monotonic_ns()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "log_level": 0,
    })
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = list(metadata.topics[topic].partitions)
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in partitions])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10000, timeout=0.5):
                if msg.error():
                    continue
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))
        return out
    finally:
        consumer.close()


class RawConnection:
    """A hand-written client: what an SDK in another language would do."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.decoder = wire.FrameDecoder()
        self.frames: list[dict] = []

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, frame: dict) -> None:
        self.send_raw(wire.encode_frame(frame))

    def receive(self) -> dict | None:
        """The next frame, or None at EOF."""
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.frames += self.decoder.feed(data)
        return self.frames.pop(0)

    def close(self) -> None:
        self.sock.close()
