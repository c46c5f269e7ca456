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

from .history import INFO, OK, Write
from .workload import _Worker

STREAM = "verify"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UpProcess:
    def __init__(self, root: Path, sock_dir: Path, topic: str, partitions: int) -> None:
        self.root = root
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.socket_path = str(sock_dir / "up.sock")
        self.config = root / "sidecar.yaml"
        self.log_path = root / "up.log"
        self.process: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(yaml.safe_dump({
            "sidecar": {"socket": self.socket_path, "metrics_listen": None},
            "broker": {"data_dir": "data", "listen": f"127.0.0.1:{self.port}",
                       "options": {"num.partitions": partitions}},
            "producer": {"acks": "all", "enable.idempotence": True, "linger.ms": 5},
            "streams": {STREAM: {"topic": topic}},
        }))

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
