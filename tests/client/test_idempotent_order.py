"""Our idempotent producer keeps a partition's records in order when the connection breaks
under one request while the next request of that partition is already waiting to go out.

Found by ``databus verify`` (nonmonotonic-send, docs/verification.md): a broker restart broke
the write of a partition's first batch; the partition's next batch, already drained, went
out on a new connection first.  The broker, as Kafka's, accepts any first sequence from a
producer it does not know on a partition, so the later batch was appended first, and the
earlier one was then refused as out of sequence again and again (delivered late under a new
producer id, or not at all within delivery.timeout.ms)."""

from __future__ import annotations

import trio

from databus.client.admin import Admin
from databus.client.producer import Producer


class BreakNextWrite:
    """Real TCP connections; while ``armed``, the next write fails after a moment (a reset by
    a broker going away), taking its connection down."""

    def __init__(self) -> None:
        self.armed = False

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        return _Breakable(await trio.open_tcp_stream(host, port), self)


class _Breakable(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream, owner: BreakNextWrite) -> None:
        self.inner, self.owner = inner, owner

    async def send_all(self, data) -> None:
        if self.owner.armed:
            self.owner.armed = False
            await trio.sleep(0.3)  # slow to fail: the next request is drained meanwhile
            await self.inner.aclose()
            raise trio.BrokenResourceError("connection reset by peer")
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None):
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_batch_whose_write_broke_is_not_overtaken_by_a_later_one(broker, topic):
    async with Admin(broker.bootstrap) as admin:
        assert await admin.create_topics({topic: 2}) == {topic: None}
    breaker = BreakNextWrite()
    config = {"enable.idempotence": True, "acks": "all", "linger.ms": 0,
              "retry.backoff.ms": 50, "reconnect.backoff.ms": 50, "delivery.timeout.ms": 30000}
    async with Producer(broker.bootstrap, config, open_stream=breaker.open_stream) as producer:
        # a producer id and an open connection, nothing written to partition 1 yet
        await (await producer.send(topic, b"warm-up", partition=0)).wait()
        breaker.armed = True
        first = await producer.send(topic, b"first", partition=1)
        await trio.sleep(0.05)  # the first batch's write is under way
        second = await producer.send(topic, b"second", partition=1)
        with trio.fail_after(20):
            first_at = (await first.wait()).offset
            second_at = (await second.wait()).offset
    assert first_at < second_at, (first_at, second_at)
