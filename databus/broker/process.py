"""Run ``databus broker`` as a child process and find its port: for tests, benchmarks and
anything else that wants a real broker process (tests/helpers/broker.py re-exports it).

    from databus.broker.process import BrokerProcess

    with BrokerProcess(tmp_path, options={"num.partitions": 3}) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        ...
        broker.kill9()        # SIGKILL, like a crash (no flush, no clean-shutdown marker)
        broker.restart()      # same data dir and port, waits until it listens again
        broker.stop()         # SIGTERM: clean shutdown; returns the exit status

- Runs ``python -m databus.cli broker --data-dir DIR --listen 127.0.0.1:0 -o k=v ...`` with
  the test's interpreter, waits (up to ``start_timeout``) for its ready file (``DIR/../
  broker.ready``, see launch.py) and takes the real port from it.  After a restart the same
  port is asked for so that clients holding the bootstrap address reconnect by themselves.
  The broker holds a lifeline to this process: it stops cleanly if this process dies.
- ``options={"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", ...}`` serves
  several listeners (no ``--listen`` then); ``bootstrap_for("SASL_SSL")`` is one's address.
  After a restart such a broker gets new ports.
- stderr goes to ``DIR/../broker.log`` (``.log_text()`` reads it) so a failing test can
  show what the broker said.  The broker writes the file itself (no pipe and copying
  thread between): a line it logged before answering is there when the answer arrives.
- The process is always killed when the context exits, even if the test failed; use it
  with ``with`` or call ``close()`` in a finally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from .launch import BrokerLaunch


class BrokerStartError(RuntimeError):
    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason  # the broker's own one-line reason, from its ready file


def _child_env() -> dict[str, str]:
    """Our environment, with this databus importable even when it is not installed."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH", "")) if p
    )
    return env


class BrokerProcess:
    def __init__(
        self,
        root: str | os.PathLike,
        options: Mapping[str, object] | None = None,
        *,
        start_timeout: float = 30.0,
        log_level: str = "INFO",
        args: tuple[str, ...] = (),
    ) -> None:
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.log_path = self.root / "broker.log"
        self.options = dict(options or {})
        self.start_timeout = start_timeout
        self.log_level = log_level
        self.args = tuple(args)  # more command-line flags (e.g. --metrics-listen)
        # more environment for the next start() (databus verify's clock fault: libfaketime)
        self.env: dict[str, str] = {}
        self.port = 0
        self.host = "127.0.0.1"
        self.listeners: dict[str, int] = {}  # listener name -> bound port
        self.schema_registry_url: str | None = None
        self.process: subprocess.Popen | None = None
        self._launch: BrokerLaunch | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        if self.process is not None and self.process.poll() is None:
            raise BrokerStartError("already running")
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "databus.cli", "--log-level", self.log_level, "broker",
            "--data-dir", str(self.data_dir),
        ]
        if "listeners" not in self.options:
            cmd += ["--listen", f"{self.host}:{self.port}"]
        for key, value in self.options.items():
            if isinstance(value, bool):
                value = str(value).lower()
            cmd += ["-o", f"{key}={value}"]
        self._close_launch()
        self._launch = launch = BrokerLaunch(self.root / "broker.ready")
        cmd += launch.args + list(self.args)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env={**_child_env(), **self.env}, pass_fds=launch.pass_fds,
            )
        launch.spawned()
        deadline = time.monotonic() + self.start_timeout
        while (ready := launch.poll()) is None:
            if self.process.poll() is not None:
                ready = launch.poll()  # it may have written the file just before exiting
                break
            if time.monotonic() > deadline:
                self.close()
                raise BrokerStartError(f"broker did not listen in {self.start_timeout}s:\n"
                                       f"{self.log_text()[-4000:]}")
            time.sleep(0.05)
        if ready is None or ready.error:
            self.process.wait(10)
            reason = ready.error if ready else None
            raise BrokerStartError(
                f"broker exited with {self.process.returncode}"
                + (f": {reason}" if reason else "") + f":\n{self.log_text()[-4000:]}",
                reason=reason,
            )
        self.port = ready.port
        self.listeners = dict(ready.listeners or {})
        self.schema_registry_url = ready.schema_registry  # with schema.registry.listen
        return self

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        """HOST:PORT of the listener named ``listener`` (see ``listeners`` in options)."""
        return f"{self.host}:{self.listeners[listener]}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        """SIGKILL and reap: a crash with no chance to flush."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (clean shutdown) and wait; returns the exit status (SIGKILL on timeout)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def restart(self, *, clean: bool = False) -> BrokerProcess:
        """Kill (-9, or SIGTERM when ``clean``) and start again on the same port and data."""
        if clean:
            self.stop()
        else:
            self.kill9()
        deadline = time.monotonic() + 10
        while True:  # the port can linger a moment after the kill
            try:
                return self.start()
            except BrokerStartError as exc:
                in_use = exc.reason is not None and "address already in use" in exc.reason
                if time.monotonic() > deadline or not in_use:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._close_launch()

    def _close_launch(self) -> None:
        if self._launch is not None:
            self._launch.close()
            self._launch = None


    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
