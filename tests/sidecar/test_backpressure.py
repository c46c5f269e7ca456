"""Backpressure with the upstream broker SIGSTOPped: the sidecar holds at most buffer.memory,
the app gets BUFFER_EXHAUSTED after max.block.ms, nothing is reported delivered before the
broker acknowledges it, and after SIGCONT everything that was queued arrives."""

from __future__ import annotations

import os
import signal
import time

import trio

from databus import BufferExhaustedError, Client

from .harness import broker_process, consume_all, running_sidecar, sidecar_config

BUFFER = 64 * 1024
MAX_BLOCK_MS = 300
VALUE = b"x" * 1000


async def test_buffer_full_with_upstream_stopped(tmp_path, sock_dir):
    async with broker_process(str(tmp_path / "data"), **{"num.partitions": 2}) as (
        bootstrap, broker
    ):
        config = sidecar_config(
            sock_dir,
            clusters={"local": {"bootstrap.servers": bootstrap}},
            sidecar={"buffer.memory": BUFFER},
            streams={"s": {"topic": "bp", "max.block.ms": MAX_BLOCK_MS}},
        )
        async with running_sidecar(config) as sidecar:
            client = await trio.to_thread.run_sync(Client, sidecar.addresses.socket)
            try:
                warm = await trio.to_thread.run_sync(
                    lambda: client.send("s", b"warm-up").result(30)
                )
                assert warm.offset == 0
                peak = 0
                os.kill(broker.pid, signal.SIGSTOP)
                try:
                    started = time.monotonic()
                    futures = await trio.to_thread.run_sync(
                        lambda: [client.send("s", VALUE, key=b"%d" % i) for i in range(400)]
                    )

                    def settled():
                        return sum(f.done() for f in futures)

                    # Wait until the sidecar has answered everything that did not fit.
                    previous = -1
                    while settled() != previous or settled() == 0:
                        previous = settled()
                        peak = max(peak, sidecar.budget.used)
                        await trio.sleep(MAX_BLOCK_MS / 1000 * 2)
                    peak = max(peak, sidecar.budget.used)
                    errors = [f.exception(0) for f in futures if f.done()]
                    pending = [f for f in futures if not f.done()]
                    first_error_after = time.monotonic() - started
                finally:
                    os.kill(broker.pid, signal.SIGCONT)

                assert errors and all(isinstance(e, BufferExhaustedError) for e in errors)
                assert "max.block.ms=300" in str(errors[0])
                assert first_error_after >= MAX_BLOCK_MS / 1000  # it waited max.block.ms
                # Bounded: what is held never exceeds buffer.memory (60 such messages).
                assert 0 < peak <= BUFFER
                assert 0 < len(pending) <= BUFFER // len(VALUE)
                # Nothing was reported delivered while the broker could not acknowledge.
                assert len(pending) + len(errors) == 400

                deliveries = await trio.to_thread.run_sync(
                    lambda: [f.result(60) for f in pending]
                )
                assert len({(d.partition, d.offset) for d in deliveries}) == len(pending)
                assert sidecar.budget.used == 0
            finally:
                await trio.to_thread.run_sync(client.close)
        records = await trio.to_thread.run_sync(
            consume_all, bootstrap, "bp", 1 + len(pending)
        )
        assert len(records) == 1 + len(pending)  # everything queued arrived, nothing else
