"""The built-in broker as a child process of ``databus up`` (its own process: both cores work).

``run_broker_process`` starts ``databus broker --data-dir DIR --listen HOST:PORT[,MORE]
[--metrics-listen HOST:PORT] -o k=v...`` (EmbeddedBrokerConfig.command_args; ``broker.listen``,
the sidecar's PLAINTEXT way in, is the first listener, so the ready file's address is its)
in a new session (so a terminal's Ctrl-C reaches only ``databus up``, which stops the broker
itself *after* the sidecar has drained into it), waits for its ready file (see
databus/broker/launch.py), reports the address through ``task_status.started``, relays the
broker's stderr to ours, and on exit sends SIGTERM (SIGKILL after a grace period).  The
broker holds a lifeline pipe to this process, so it stops cleanly if ``databus up`` dies,
even by kill -9.  If the broker cannot start or dies on its own, ``BrokerExited`` is raised
so ``databus up`` stops instead of serving into the void.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile

import trio

from databus.broker.launch import BrokerLaunch, Ready
from databus.config import EmbeddedBrokerConfig

log = logging.getLogger("databus.up")


class BrokerExited(RuntimeError):
    """The broker could not start (the message is its reason) or ended (the message has its
    last output)."""


def broker_command(config: EmbeddedBrokerConfig, listen: str | None = None) -> list[str]:
    return [sys.executable, "-m", "databus.cli", "broker", *config.command_args(listen)]


async def run_broker_process(
    config: EmbeddedBrokerConfig,
    *,
    listen: str | None = None,
    relay=sys.stderr.buffer,
    startup_timeout: float = 60.0,
    stop_timeout: float = 20.0,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the broker until cancelled; ``task_status.started((host, port, process,
    listeners))``: the first listener's (``broker.listen``) address, and every listener's
    bound port by name."""
    with tempfile.TemporaryDirectory(prefix="databus-broker-") as tmp:
        launch = BrokerLaunch(os.path.join(tmp, "ready.json"))
        try:
            process = await trio.lowlevel.open_process(
                broker_command(config, listen) + launch.args,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=launch.pass_fds,
            )
            launch.spawned()
            await _supervise(process, launch, relay, startup_timeout, stop_timeout, task_status)
        finally:
            launch.close()


async def _supervise(process, launch, relay, startup_timeout, stop_timeout, task_status):
    tail: list[bytes] = []
    try:
        ready = None
        async with trio.open_nursery() as startup:
            async def watch():
                nonlocal ready
                ready = await _wait_ready(process, launch, startup_timeout)
                if ready is not None and ready.error is None:
                    startup.cancel_scope.cancel()  # stop relaying here; continued below

            startup.start_soon(_relay, process.stderr, relay, tail)
            startup.start_soon(watch)
        if ready is None or ready.error is not None:
            await process.wait()
            raise BrokerExited(
                f"cannot start the built-in broker: {ready.error}" if ready is not None
                else _exit_message(process, tail)
            )
        task_status.started((ready.host, ready.port, process, ready.listeners or {}))
        await _relay(process.stderr, relay, tail)
        await process.wait()
        raise BrokerExited(_exit_message(process, tail))
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process, stop_timeout)
            with trio.move_on_after(2):  # the broker's last words (its shutdown log)
                await _relay(process.stderr, relay, tail)


async def _wait_ready(process, launch: BrokerLaunch, timeout: float) -> Ready | None:
    """The ready file's content once there is one; None if the broker exits without one."""
    with trio.move_on_after(timeout):
        while (ready := launch.poll()) is None:
            if process.poll() is not None:
                return launch.poll()  # it may have written the file just before exiting
            await trio.sleep(0.05)
        return ready
    raise BrokerExited(f"the built-in broker did not start listening within {timeout:.0f}s")


async def _relay(stream, relay, tail: list[bytes]) -> None:
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        _write(relay, chunk)
        tail[:] = (tail + chunk.splitlines())[-20:]


def _write(relay, data: bytes) -> None:
    if relay is None:
        return
    try:
        relay.write(data)
        relay.flush()
    except (OSError, ValueError):
        pass


def _exit_message(process, tail: list[bytes]) -> str:
    last = b"\n".join(line for line in tail if line.strip()).decode(errors="replace")
    return f"the broker exited with status {process.returncode}" + (
        f"; its last output:\n{last}" if last else ""
    )


async def _stop(process, timeout: float) -> None:
    if process.returncode is not None:
        return
    try:
        # A SIGSTOPped broker (tests) would never see SIGTERM: continue it first.
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return
    with trio.move_on_after(timeout):
        await process.wait()
        return
    log.warning("the broker did not stop within %.0fs: killing it", timeout)
    process.kill()
    await process.wait()
