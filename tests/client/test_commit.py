"""Consumer.commit() against our broker (a real ``databus broker`` subprocess) when the
coordinator's connection fails under it: retriable failures are retried within
``default.api.timeout.ms``, as Kafka's commitSync; other errors raise at once."""

from __future__ import annotations

import pytest
import trio

from databus.client import errors
from databus.client.admin import Admin
from databus.client.consumer import Consumer
from databus.protocol.api_keys import ApiKey


class CommitCutter:
    """The consumer's ``open_stream``: real TCP connections, each closed by the client right
    after it wrote an OffsetCommit while ``cuts`` is above zero (the commit reaches the broker,
    its answer never reaches the client: a connection lost under the commit)."""

    def __init__(self, cuts: int = 0) -> None:
        self.cuts = cuts
        self.commits_sent = 0
        self.connections = 0

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        self.connections += 1
        return _CuttingStream(await trio.open_tcp_stream(host, port), self)


class _CuttingStream(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream, cutter: CommitCutter) -> None:
        self.inner, self.cutter = inner, cutter

    async def send_all(self, data) -> None:
        await self.inner.send_all(data)
        # a frame: int32 size, then the request header's int16 api key
        if int.from_bytes(bytes(data[4:6]), "big") == ApiKey.OFFSET_COMMIT:
            self.cutter.commits_sent += 1
            if self.cutter.cuts > 0:
                self.cutter.cuts -= 1
                await self.inner.aclose()

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None):
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def create(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap) as admin:
        assert await admin.create_topics({topic: 1}) == {topic: None}


async def test_commit_retries_when_the_coordinator_connection_is_closed_under_it(broker, topic):
    """Twice in a row the connection is lost after the OffsetCommit was written: commit()
    finds the coordinator again, reconnects and commits (before, it raised NETWORK_EXCEPTION
    on the first loss)."""
    await create(broker.bootstrap, topic)
    cutter = CommitCutter(cuts=2)
    async with Consumer(broker.bootstrap, {"group.id": f"{topic}-g", "enable.auto.commit": False},
                        open_stream=cutter.open_stream) as consumer:
        consumer.assign([(topic, 0)])
        await consumer.commit({(topic, 0): 5})
        assert cutter.cuts == 0 and cutter.commits_sent == 3
        assert await consumer.committed((topic, 0)) == 5


async def test_commit_gives_up_after_its_timeout_naming_the_last_failure(broker, topic):
    await create(broker.bootstrap, topic)
    cutter = CommitCutter(cuts=10**6)  # every connection is lost under its commit
    async with Consumer(broker.bootstrap, {"group.id": f"{topic}-g", "enable.auto.commit": False,
                                           "default.api.timeout.ms": 500},
                        open_stream=cutter.open_stream) as consumer:
        consumer.assign([(topic, 0)])
        with pytest.raises(errors.RequestTimedOutError,
                           match=r"offsets not committed within 0.5s \(default.api.timeout.ms\); "
                                 r"last error: .*(broker closed the connection|connection lost)"):
            await consumer.commit({(topic, 0): 5})
        assert cutter.commits_sent >= 1
        cutter.cuts = 0
        await consumer.commit({(topic, 0): 6}, timeout=30)  # the consumer is still usable
        assert await consumer.committed((topic, 0)) == 6


async def test_a_commit_the_group_refuses_raises_at_once(broker, topic):
    """A consumer outside the group's generation (manual assignment, the group has a live
    member) gets a non-retriable error from the coordinator: raised on the first answer, with
    no second OffsetCommit sent (Java's commitSync throws CommitFailedException)."""
    await create(broker.bootstrap, topic)
    group = f"{topic}-g"
    config = {"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    async with Consumer(broker.bootstrap, config) as member:
        member.subscribe([topic])
        with trio.fail_after(30):  # a hang guard, not a timing check
            while not member.assignment():
                await member.poll(0.1)
        cutter = CommitCutter()
        async with Consumer(broker.bootstrap, config, open_stream=cutter.open_stream) as outsider:
            outsider.assign([(topic, 0)])
            with pytest.raises(errors.UnknownMemberIdError, match="OffsetCommit"):
                await outsider.commit({(topic, 0): 5})
            assert cutter.commits_sent == 1
