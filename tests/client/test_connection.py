"""One broker connection: version negotiation, pipelining, and failure rules."""

from __future__ import annotations

import pytest
import trio

from databus.client import errors
from databus.client.cluster import Cluster, parse_bootstrap
from databus.client.config import ConsumerConfig
from databus.client.connection import CLIENT_VERSIONS, BrokerConnection
from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build_request


async def test_negotiates_versions_and_pipelines_requests(broker):
    host, port = parse_bootstrap(broker.bootstrap)[0]
    async with trio.open_nursery() as nursery:
        conn = BrokerConnection(host, port)
        await conn.connect(nursery)
        for key, version in conn.versions.items():
            lo, hi = CLIENT_VERSIONS[key]
            blo, bhi = conn.broker_versions[key]
            assert version == min(hi, bhi) and version >= max(lo, blo)
        assert conn.versions[ApiKey.PRODUCE] >= 3
        results = []

        async def ask(i):
            response = await conn.request(
                ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False}
            )
            results.append((i, len(response.brokers)))

        async with trio.open_nursery() as requests:
            for i in range(50):
                requests.start_soon(ask, i)
        assert sorted(results) == [(i, 1) for i in range(50)]
        await conn.aclose()
        with pytest.raises(errors.KafkaConnectionError):
            await conn.request(ApiKey.METADATA, {"topics": []})


async def serve_silently(task_status=trio.TASK_STATUS_IGNORED):
    """A TCP peer that accepts and reads but never answers (a frozen broker)."""
    async def handler(stream):
        async with stream:
            while await stream.receive_some(65536):
                pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handler, listeners)


async def test_unanswered_request_times_out_and_closes_the_connection():
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_silently)
        conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=300)
        with pytest.raises(errors.RequestTimedOutError, match="no response to api key 18"):
            await conn.connect(nursery)  # ApiVersions is never answered
        assert conn.closed
        nursery.cancel_scope.cancel()


async def test_refused_connection_is_a_clear_error():
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    async with trio.open_nursery() as nursery:
        conn = BrokerConnection("127.0.0.1", port, node_id=7)
        with pytest.raises(errors.KafkaConnectionError, match=f"broker 7 at 127.0.0.1:{port}"):
            await conn.connect(nursery)


def test_bootstrap_parsing():
    assert parse_bootstrap("a:1, PLAINTEXT://b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    assert parse_bootstrap(":9092") == [("localhost", 9092)]  # as Kafka's clients
    with pytest.raises(errors.ConfigError, match="bootstrap.servers must be HOST:PORT, got 'nohost'"):
        parse_bootstrap("nohost")
    with pytest.raises(errors.ConfigError, match="got 'b:0': port 0 is not in 1..65535"):
        parse_bootstrap("a:1, b:0")
    with pytest.raises(errors.ConfigError, match="empty"):
        parse_bootstrap(" , ")


class _SteppedStream(trio.abc.Stream):
    """A real TCP stream that moves a few bytes per checkpoint, so a request can be cancelled
    at each point of its send and of the read of its answer (``cancel_at``: the step number
    and the caller's cancel scope; steps are counted only while it is set)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.cancel_at: tuple[int, trio.CancelScope] | None = None
        self.steps = 0

    async def _step(self) -> None:
        if self.cancel_at is not None:
            at, scope = self.cancel_at
            if self.steps == at:
                scope.cancel()
            self.steps += 1
        await trio.lowlevel.checkpoint()  # raises Cancelled in the sending caller

    async def send_all(self, data) -> None:
        view = memoryview(data)
        piece = max(1, len(view) // 3)  # before the first byte, in the middle, at the end
        for start in range(0, len(view), piece):
            await self._step()
            await self.inner.send_all(view[start:start + piece])

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes=None):
        await self._step()  # in the reader task: cancels the caller waiting for this answer
        return await self.inner.receive_some(7)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_request_cancelled_anywhere_leaves_the_connection_usable_or_closed(broker, topic):
    """A request cancelled at any point of its send or of the read of its answer must not put
    the connection out of frame: the next request on it gets its own answer, or the connection
    is closed (and a new one works).  Before the fix, a request cancelled inside send_all stayed
    in the FIFO (and half a frame could stay on the wire), so the next answer was decoded with
    its schema: "undecodable response to api key 9 v5: Buffer is exhausted" on a commit."""
    host, port = parse_bootstrap(broker.bootstrap)[0]
    streams: list[_SteppedStream] = []

    async def open_stepped(h, p):
        streams.append(_SteppedStream(await trio.open_tcp_stream(h, p)))
        return streams[-1]

    group = f"{topic}-g"
    async with trio.open_nursery() as nursery:
        admin = BrokerConnection(host, port)
        await admin.connect(nursery)
        created = await admin.request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 10000})
        assert created.topics[0].error_code == 0
        conn, outcomes, step = None, set(), 0
        while True:
            if conn is None or conn.closed:
                conn = BrokerConnection(host, port, open_stream=open_stepped)
                await conn.connect(nursery)
            stream = streams[-1]
            with trio.CancelScope() as scope:
                stream.steps, stream.cancel_at = 0, (step, scope)
                await conn.request(ApiKey.OFFSET_FETCH, {
                    "group_id": group, "require_stable": False,
                    "topics": [{"name": topic, "partition_indexes": [0]}]})
            stream.cancel_at = None
            if not scope.cancelled_caught:
                break  # past the last step: every point has been tried
            outcomes.add("closed" if conn.closed else "kept")
            if conn.closed:
                with pytest.raises(errors.KafkaConnectionError, match="interrupted while being"):
                    await conn.request(ApiKey.METADATA, {"topics": []})
                conn = BrokerConnection(host, port, open_stream=open_stepped)
                await conn.connect(nursery)
            # the next request (a commit, as in the failure seen) gets its own answer
            committed = await conn.request(ApiKey.OFFSET_COMMIT, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time": -1,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "committed_offset": step,
                     "committed_leader_epoch": -1, "committed_metadata": None}]}]})
            assert committed.topics[0].partitions[0].error_code == 0
            step += 1
        # a cancelled send closes; a cancelled wait for the answer keeps the connection
        assert outcomes == {"closed", "kept"} and step > 4, (outcomes, step)
        fetched = await conn.request(ApiKey.OFFSET_FETCH, {
            "group_id": group, "require_stable": False,
            "topics": [{"name": topic, "partition_indexes": [0]}]})
        assert fetched.topics[0].partitions[0].committed_offset == step - 1
        nursery.cancel_scope.cancel()


async def test_a_cancellation_while_waiting_to_write_keeps_the_connection(broker):
    """The race seen under load: a poll's timeout ends while its OffsetFetch is being handed
    the connection's send lock.  Nothing is on the wire yet, so the request is dropped before
    it is registered and the connection stays usable (no reconnect, no failed neighbours)."""
    host, port = parse_bootstrap(broker.bootstrap)[0]

    class CancelOnHandover:
        """The send lock, as a task that is cancelled right after being handed it sees it."""

        def __init__(self, lock: trio.Lock) -> None:
            self.lock, self.scope = lock, None

        async def __aenter__(self):
            await self.lock.acquire()
            if self.scope is not None:
                self.scope.cancel()

        async def __aexit__(self, *exc):
            self.lock.release()

    async with trio.open_nursery() as nursery:
        conn = BrokerConnection(host, port)
        await conn.connect(nursery)
        conn._send_lock = handover = CancelOnHandover(conn._send_lock)
        with trio.CancelScope() as scope:
            handover.scope = scope
            await conn.request(ApiKey.METADATA, {"topics": []})
        handover.scope = None
        assert scope.cancelled_caught and conn.in_flight == 0 and not conn.closed
        groups = await conn.request(ApiKey.LIST_GROUPS, {})  # gets its own answer
        assert groups.error_code == 0
        await conn.aclose()



async def test_a_request_timeout_closes_the_socket_and_fails_the_requests_behind_it(broker, topic):
    """As Kafka's NetworkClient: a request timeout disconnects at once.  A Fetch that the
    broker holds (max wait 30 s on an empty topic) is given up after 0.3 s: the socket is
    closed then (not when the broker answers), the Metadata pipelined behind it fails with
    the same retriable error, and the cluster's next request opens a new connection."""
    sockets = []

    async def open_tcp(h, p):
        stream = await trio.open_tcp_stream(h, p)
        sockets.append(stream.socket)
        return stream

    cluster = Cluster(broker.bootstrap, ConsumerConfig.from_kafka({}), open_stream=open_tcp)
    async with cluster.running():
        conn = await cluster.connection(-1)
        created = await conn.request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 10000})
        assert created.topics[0].error_code == 0
        fetch = await conn.write(build_request(ApiKey.FETCH, conn.version(ApiKey.FETCH), {
            "replica_id": -1, "max_wait": 30000, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}],
            "forgotten_topics_data": []}))
        behind = await conn.write(build_request(ApiKey.METADATA, conn.version(ApiKey.METADATA),
                                                {"topics": []}))
        with pytest.raises(errors.RequestTimedOutError, match="no response to api key 1 "):
            await conn.wait(fetch, timeout=0.3)
        assert conn.closed and sockets[0].fileno() == -1  # closed now, not at the broker's answer
        with pytest.raises(errors.RequestTimedOutError) as behind_error:
            await conn.wait(behind)
        assert behind_error.value.retriable
        assert (await cluster.request(-1, ApiKey.METADATA, {"topics": []})).brokers
        assert len(sockets) == 2 and await cluster.connection(-1) is not conn
