"""A produce frame from admission to its reports, for one connection.

The hot path works a frame at a time.  Admission: the frame's bytes come out of
buffer.memory at once and it enters the reload gate, which gives it the routing table to
use (neither waits).  When either refuses (buffer.memory is full, or a reload is swapping
tables) the messages are taken one at a time instead, each waiting for room until its
arrival + its stream's max.block.ms and for the reload to end, and each is handed upstream
at once: what is held must drain for the rest to get room.  Then the router decides where
each message goes (``router.place_frame``), each group is handed to its producer in one
``send_batch`` call, and the producer's answers (``group_done``, a batch at a time) give
the bytes back and become reports in the session.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from databus.plugins import PluginError
from databus.protocol.sidecar_wire import ErrorCode

from .budget import ByteBudget
from .gate import ReloadGate
from .router import Group, Rejected, RoutingTable, place_frame, resolve, unplaced
from .session import Session
from .upstream import error_code_of, is_kafka_error

log = logging.getLogger("databus.sidecar.produce.dispatch")


class Dispatcher:
    def __init__(self, session: Session, budget: ByteBudget, gate: ReloadGate[RoutingTable],
                 metrics: Any, name: str) -> None:
        self.session = session
        self.budget = budget
        self.gate = gate
        self.metrics = metrics
        self.name = name
        self._latency = metrics.latency

    async def produce(self, messages: list[tuple], sizes: list[int], arrival: float) -> None:
        """Take one produce frame's messages (parsed; ``arrival``: time.monotonic())."""
        access = self.session.access
        if access is not None and not all(access.allows(m[1]) for m in messages):
            messages, sizes = self._allowed(access, messages, sizes)
            if not messages:
                return
        gate = self.gate
        table = gate.try_enter()
        if table is not None:
            if self.budget.try_acquire(sum(sizes)):
                try:
                    await self._dispatch(table, messages, sizes, arrival)
                finally:
                    gate.leave()
                return
            gate.leave()
        for message, size in zip(messages, sizes):
            table = await self._wait_for_room(message, size, arrival)
            if table is not None:
                try:
                    await self._dispatch(table, [message], [size], arrival)
                finally:
                    gate.leave()

    def _allowed(self, access, messages: list[tuple], sizes: list[int]):
        """The messages whose streams the app's token allows; the others are answered
        STREAM_NOT_ALLOWED now (they never took buffer room)."""
        kept, kept_sizes = [], []
        for message, size in zip(messages, sizes):
            if access.allows(message[1]):
                kept.append(message)
                kept_sizes.append(size)
            else:
                self.reject(message[0], 0, ErrorCode.STREAM_NOT_ALLOWED,
                            f"app {access.app!r} may not send to stream {message[1]!r} "
                            "(sidecar.tokens)")
        return kept, kept_sizes

    async def _dispatch(self, table: RoutingTable, messages: list[tuple], sizes: list[int],
                        arrival: float) -> None:
        """Place ``messages`` (their bytes already taken) and queue each group upstream."""
        groups = await place_frame(
            table, messages, sizes, arrival, int(time.time() * 1000), self
        )
        for group in groups:
            await self._send_group(group)

    async def _wait_for_room(self, message: tuple, size: int,
                             arrival: float) -> RoutingTable | None:
        """Take ``size`` bytes of buffer.memory for one message, waiting until ``arrival`` +
        its stream's max.block.ms at most, then enter the gate (waiting out a reload).
        Returns the table to route it with, or None with the message answered."""
        budget = self.budget
        id_ = message[0]
        try:
            route = resolve(self.gate.current, message[1])  # for its max.block.ms
        except (Rejected, PluginError) as exc:
            unplaced(self, id_, 0, exc, None)
            return None
        if size > budget.limit:
            self.reject(
                id_, 0, ErrorCode.MESSAGE_TOO_LARGE,
                f"message of {size} bytes exceeds buffer.memory={budget.limit}",
            )
            return None
        left = arrival + route.max_block - time.monotonic()
        if not await budget.acquire(size, trio.current_time() + max(left, 0.0)):
            self.reject(
                id_, 0, ErrorCode.BUFFER_EXHAUSTED,
                f"buffer.memory={budget.limit} bytes stayed full for "
                f"max.block.ms={int(route.max_block * 1000)}",
            )
            return None
        table = await self.gate.enter()
        if table is None:
            self.reject(id_, size, ErrorCode.SHUTTING_DOWN, "the sidecar is stopping")
        return table

    async def _send_group(self, group: Group) -> None:
        n = len(group.ids)
        group.remaining = n
        group.total = total = sum(group.sizes)
        stats = group.route.stats
        stats.messages_in += n
        stats.bytes_in += total
        group.seq = self.session.open_group()
        records, group.records = group.records, []  # the producer holds them from here on
        if group.own_timestamps:
            group.timestamp = [record[0] for record in records]
        try:
            await group.route.producer.send_batch(group.topic, group.partition, records, group)
        except Exception as exc:
            if not is_kafka_error(exc):
                log.exception("%s: queueing %d message(s) failed", self.name, n)
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")  # UNKNOWN_SERVER_ERROR
            group.batch_done(0, n, -1, -1, exc)

    # --- answers (router.Answers) ---------------------------------------------------------

    def reject(self, id_: int, size: int, code: int, message: str) -> None:
        """Message ``id_`` is not sent: answer it with ``code``, give its ``size`` back."""
        if size:  # (a release wakes the budget's waiters: not for nothing)
            self.budget.release(size)
        self.metrics.error(code)
        self.session.send_error_report(id_, code, message)

    def dropped(self, id_: int, size: int, topic: str) -> None:
        """A route plugin dropped message ``id_`` on purpose: delivered nowhere."""
        self.budget.release(size)
        self.session.send_report([id_, 0, topic, -1, -1, -1])

    def group_done(
        self, group: Group, start: int, count: int, first_offset: int, append_ms: int,
        error: BaseException | None,
    ) -> None:
        """``count`` messages of ``group`` from its ``start``-th are done: answer them with
        one report, give their bytes back."""
        whole = count == len(group.ids)
        ids = group.ids if whole else group.ids[start : start + count]
        size = group.total if whole else sum(group.sizes[start : start + count])
        self.budget.release(size)
        if error is None:
            stats = group.route.stats
            stats.messages_out += count
            stats.bytes_out += size
            self._latency.observe(time.monotonic() - group.arrival, count)
            if append_ms >= 0:
                timestamp = append_ms
            elif group.own_timestamps:
                timestamp = group.timestamp[start : start + count]
            else:
                timestamp = group.timestamp
            self.session.send_report(
                [ids, 0, group.topic, group.partition, first_offset, timestamp]
            )
        else:
            code = error_code_of(error)
            self.metrics.error(code, count)
            self.session.send_report([ids, int(code), str(error) or type(error).__name__])
        group.remaining -= count
        if group.remaining <= 0:
            self.session.close_group(group.seq)
