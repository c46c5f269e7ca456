"""The built-in broker as a child process of ``databus up`` (its own process: both cores work).

``run_broker_process`` starts ``databus broker --data-dir DIR --listen HOST:PORT -o k=v...``
in a new session (so a terminal's Ctrl-C reaches only ``databus up``, which stops the broker
itself *after* the sidecar has drained into it), waits for its ``listening on HOST:PORT``
line, reports that address through ``task_status.started``, relays the broker's stderr to
ours, and on exit sends SIGTERM (SIGKILL after a grace period).  If the broker dies on its
own, ``BrokerExited`` is raised so ``databus up`` stops instead of serving into the void.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys

import trio

from databus.config import EmbeddedBrokerConfig, broker_option_args

log = logging.getLogger("databus.up")

LISTENING = re.compile(rb"listening on (\S+):(\d+)")


class BrokerExited(RuntimeError):
    """The broker process ended (or never listened); the message has its last output."""


def broker_command(config: EmbeddedBrokerConfig, listen: str | None = None) -> list[str]:
    cmd = [
        sys.executable, "-m", "databus.cli", "broker",
        "--data-dir", config.data_dir, "--listen", listen or config.listen,
    ]
    for option in broker_option_args(config.options):
        cmd += ["-o", option]
    return cmd


async def run_broker_process(
    config: EmbeddedBrokerConfig,
    *,
    listen: str | None = None,
    relay=sys.stderr.buffer,
    startup_timeout: float = 60.0,
    stop_timeout: float = 20.0,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the broker until cancelled; ``task_status.started((host, port, process))``."""
    os.makedirs(config.data_dir, exist_ok=True)
    process = await trio.lowlevel.open_process(
        broker_command(config, listen),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    tail: list[bytes] = []
    try:
        address = await _wait_listening(process, relay, tail, startup_timeout)
        task_status.started((*address, process))
        await _relay(process.stderr, relay, tail)
        await process.wait()
        raise BrokerExited(_exit_message(process, tail))
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process, stop_timeout)
            with trio.move_on_after(2):  # the broker's last words (its shutdown log)
                await _relay(process.stderr, relay, tail)


def _die_with_parent() -> None:
    """In the child: get SIGTERM if ``databus up`` dies, even by kill -9 (Linux only), so a
    broker is never left running without its sidecar."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


async def _wait_listening(process, relay, tail: list[bytes], timeout: float):
    buffer = b""
    with trio.move_on_after(timeout):
        while True:
            chunk = await process.stderr.receive_some(65536)
            if not chunk:
                await process.wait()
                raise BrokerExited(_exit_message(process, tail + [buffer]))
            _write(relay, chunk)
            buffer += chunk
            tail[:] = buffer.splitlines()[-20:]
            match = LISTENING.search(buffer)
            if match:
                return match.group(1).decode().strip("[]"), int(match.group(2))
    raise BrokerExited(f"the broker did not report 'listening on' within {timeout:.0f}s")


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
