"""The client's timers on a virtual clock: retry and reconnect backoff, delivery and request
timeouts, group heartbeats and session timeout, fetch backoff.

The client runs unchanged against tests/client/fake_broker.py (Kafka's wire format over
``trio.testing`` memory streams, handed to it as ``open_stream``), on pytest-trio's
``autojump_clock``: whenever every task waits, virtual time jumps to the next deadline.  So
a test covering a 45 s session timeout runs in milliseconds, and the arrival time of each
request at the fake broker is exact — the assertions read those times.  Where Kafka jitters
a backoff (±20%), the test checks the jitter band.
"""

from __future__ import annotations

import itertools

import pytest
import trio

from databus.client import Consumer, Producer, errors
from databus.client.cluster import Cluster
from databus.client.config import ProducerConfig
from databus.protocol.records import parse_header

from .fake_broker import (
    CLOSE,
    FETCH,
    FIND_COORDINATOR,
    HANG,
    HEARTBEAT,
    JOIN_GROUP,
    METADATA,
    PRODUCE,
    FakeBroker,
)

NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, REBALANCE_IN_PROGRESS = 6, 7, 27
EPS = 1e-6  # float noise in virtual-clock arithmetic


@pytest.fixture
async def fake(nursery):
    broker = FakeBroker({"t": 1})
    await nursery.start(broker.run)
    return broker


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def in_jitter_band(gap_s: float, nominal_ms: float, max_ms: float) -> bool:
    """Kafka's backoff: min(nominal, max) * [0.8, 1.2), never above the maximum."""
    nominal_ms = min(nominal_ms, max_ms)
    low = 0.8 * nominal_ms / 1000
    high = min(1.2 * nominal_ms, max_ms) / 1000
    return low - EPS <= gap_s <= high + EPS


def failing_produce(fake: FakeBroker, codes: list[int]):
    """Produce answers: the given error codes in turn, then the broker's normal answer."""
    pending = list(codes)

    def produce(req):
        if not pending:
            return fake.produce(req)
        code = pending.pop(0)
        return {"responses": [
            {"name": t.name, "partition_responses": [
                {"index": p.index, "error_code": code, "base_offset": -1, "log_append_time": None}
                for p in t.partition_data
            ]}
            for t in req.topic_data
        ]}

    return produce


# -- producer: retries, backoff, timeouts -----------------------------------------------------


@pytest.mark.parametrize("code", [NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT])
async def test_retriable_produce_error_is_retried_after_retry_backoff(autojump_clock, fake, code):
    fake.handlers[PRODUCE] = failing_produce(fake, [code])
    config = {"linger.ms": 0, "retry.backoff.ms": 300, "retry.backoff.max.ms": 300}
    async with Producer(fake.bootstrap, config, open_stream=fake.open_stream) as producer:
        meta = await (await producer.send("t", b"v")).wait()
        retries = producer.statistics().retries
    first, second = fake.times(PRODUCE)
    # retry.backoff.max.ms == retry.backoff.ms: a constant wait, no jitter (as Kafka).
    assert second - first == pytest.approx(0.3, abs=EPS)
    assert meta.offset == 0 and retries == 1
    # Both errors may mean the leader moved: metadata is refreshed before the retry.
    assert any(first <= t <= second for t in fake.times(METADATA)[1:])


async def test_retry_backoff_doubles_up_to_retry_backoff_max_and_keeps_the_sequence(
    autojump_clock, fake
):
    fake.handlers[PRODUCE] = failing_produce(fake, [NOT_LEADER_OR_FOLLOWER] * 6)
    config = {"linger.ms": 0, "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000}
    async with Producer(fake.bootstrap, config, open_stream=fake.open_stream) as producer:
        meta = await (await producer.send("t", b"v")).wait()
    assert meta.offset == 0
    waits = gaps(fake.times(PRODUCE))
    nominal = [100, 200, 400, 800, 1600, 3200]
    assert len(waits) == len(nominal)
    for wait, ms in zip(waits, nominal):
        assert in_jitter_band(wait, ms, 1000), (wait, ms)
    # Idempotence: every attempt is the same batch with the same sequence number.
    sequences = {
        parse_header(bytes(r.body.topic_data[0].partition_data[0].records)).base_sequence
        for r in fake.received if r.api_key == PRODUCE
    }
    assert sequences == {0}


async def test_delivery_timeout_fails_a_batch_that_keeps_failing(autojump_clock, fake):
    fake.handlers[PRODUCE] = failing_produce(fake, [NOT_LEADER_OR_FOLLOWER] * 1000)
    config = {"linger.ms": 0, "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000,
              "request.timeout.ms": 1000, "delivery.timeout.ms": 5000}
    async with Producer(fake.bootstrap, config, open_stream=fake.open_stream) as producer:
        sent_at = trio.current_time()
        future = await producer.send("t", b"v")
        with pytest.raises(errors.DeliveryTimeoutError) as info:
            await future.wait()
        failed_at = trio.current_time()
    assert failed_at - sent_at == pytest.approx(5.0, abs=EPS)
    assert "delivery.timeout.ms=5000" in str(info.value)
    assert "NotLeaderOrFollower" in str(info.value) or "NOT_LEADER" in str(info.value)
    # It was retried all along (not given up early, not a tight loop).
    attempts = fake.times(PRODUCE)
    assert 5 <= len(attempts) <= 12 and all(t < failed_at for t in attempts)


async def test_unanswered_produce_times_out_and_is_retried_on_a_new_connection(
    autojump_clock, fake
):
    answers = [HANG]

    def produce(req):
        return answers.pop(0) if answers else fake.produce(req)

    fake.handlers[PRODUCE] = produce
    config = {"linger.ms": 0, "retry.backoff.ms": 100, "retry.backoff.max.ms": 100,
              "request.timeout.ms": 2000, "delivery.timeout.ms": 10000}
    async with Producer(fake.bootstrap, config, open_stream=fake.open_stream) as producer:
        meta = await (await producer.send("t", b"v")).wait()
    first, second = (r for r in fake.received if r.api_key == PRODUCE)
    # request.timeout.ms, then retry.backoff.ms; the timed-out connection is not reused.
    assert second.time - first.time == pytest.approx(2.0 + 0.1, abs=EPS)
    assert second.connection != first.connection
    assert meta.offset == 0


# -- connections: reconnect backoff ------------------------------------------------------------


async def test_reconnect_backoff_doubles_up_to_its_max_and_resets_after_success(
    autojump_clock, fake
):
    config = ProducerConfig.from_kafka({"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000})
    cluster = Cluster(fake.bootstrap, config, open_stream=fake.open_stream)
    async with cluster.running():
        fake.refuse = True
        for _ in range(8):
            with pytest.raises(errors.KafkaConnectionError, match="refused"):
                await cluster.connection(-1)
        nominal = [50, 100, 200, 400, 800, 1600, 3200]
        waits = gaps(fake.connect_attempts)
        assert len(waits) == len(nominal)
        for wait, ms in zip(waits, nominal):
            assert in_jitter_band(wait, ms, 1000), (wait, ms)

        fake.refuse = False
        conn = await cluster.connection(-1)  # waits out the last backoff, then connects
        assert in_jitter_band(gaps(fake.connect_attempts)[-1], 6400, 1000)

        # After a success the backoff starts again from reconnect.backoff.ms.
        await conn.aclose()
        fake.refuse = True
        before = len(fake.connect_attempts)
        for _ in range(2):
            with pytest.raises(errors.KafkaConnectionError):
                await cluster.connection(-1)
        first, second = fake.connect_attempts[before:]
        assert in_jitter_band(second - first, 50, 1000)


async def test_producer_outlives_a_refusing_broker_without_a_tight_loop(
    autojump_clock, fake, nursery
):
    """The broker refuses connections for 10 s: the record is delivered afterwards, and the
    producer asked at most once per backoff meanwhile."""
    config = {"linger.ms": 0, "delivery.timeout.ms": 60000}
    fake.refuse = True
    nursery.start_soon(_reopen_after, fake, 10.0)
    async with Producer(fake.bootstrap, config, open_stream=fake.open_stream) as producer:
        meta = await (await producer.send("t", b"v")).wait()
    assert meta.offset == 0
    refused = [t for t in fake.connect_attempts if t < 10.0]
    # reconnect.backoff.max.ms is 1 s: ~10 attempts in 10 s (plus the doubling start).
    assert 5 <= len(refused) <= 20
    assert fake.connect_attempts[-1] - 10.0 <= 1.2 + EPS  # reconnected within one max backoff


async def _reopen_after(fake: FakeBroker, delay: float) -> None:
    await trio.sleep(delay)
    fake.refuse = False


# -- consumer group: heartbeats, rebalance, session timeout -------------------------------------

GROUP_CONFIG = {
    "group.id": "g",
    "heartbeat.interval.ms": 1000,
    "session.timeout.ms": 6000,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
}


class Listener:
    """Rebalance callbacks with the virtual time of each call."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, list]] = []

    def assigned(self, partitions):
        self.events.append((trio.current_time(), "assigned", partitions))

    def revoked(self, partitions):
        self.events.append((trio.current_time(), "revoked", partitions))


async def poll_forever(consumer: Consumer) -> None:
    while True:
        await consumer.poll(0.5)


async def test_member_heartbeats_every_heartbeat_interval(autojump_clock, fake):
    listener = Listener()
    async with Consumer(fake.bootstrap, GROUP_CONFIG, open_stream=fake.open_stream,
                        on_assigned=listener.assigned, on_revoked=listener.revoked) as consumer:
        consumer.subscribe(["t"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_forever, consumer)
            await trio.sleep(10.5)
            nursery.cancel_scope.cancel()
        assert consumer.assignment() == {("t", 0)}
    beats = fake.times(HEARTBEAT)
    assert len(beats) >= 9
    assert all(g == pytest.approx(1.0, abs=EPS) for g in gaps(beats))
    assert len(fake.times(JOIN_GROUP)) == 1
    assert [kind for _, kind, _ in listener.events] == ["assigned", "revoked"]  # revoked: close


async def test_rebalance_in_progress_makes_the_member_rejoin(autojump_clock, fake):
    answers = [{}, {}, {"error_code": REBALANCE_IN_PROGRESS}]

    def heartbeat(req):
        return answers.pop(0) if answers else {}

    fake.handlers[HEARTBEAT] = heartbeat
    listener = Listener()
    async with Consumer(fake.bootstrap, GROUP_CONFIG, open_stream=fake.open_stream,
                        on_assigned=listener.assigned, on_revoked=listener.revoked) as consumer:
        consumer.subscribe(["t"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_forever, consumer)
            await trio.sleep(8.5)
            nursery.cancel_scope.cancel()
        assert consumer.assignment() == {("t", 0)}
    beats = [r for r in fake.received if r.api_key == HEARTBEAT]
    joins = fake.times(JOIN_GROUP)
    assert len(joins) == 2
    rebalance_at = beats[2].time
    # The member rejoins within one heartbeat interval of being told.
    assert rebalance_at <= joins[1] <= rebalance_at + 1.0 + EPS
    # Eager (range): everything revoked before the rejoin, assigned again after it.
    kinds = [(kind, parts) for _, kind, parts in listener.events]
    assert kinds[:3] == [("assigned", [("t", 0)]), ("revoked", [("t", 0)]), ("assigned", [("t", 0)])]
    # Heartbeats go on in the new generation.
    assert {int(b.body.generation_id) for b in beats if b.time > joins[1]} == {2}


async def test_member_gives_up_its_partitions_after_session_timeout_without_heartbeats(
    autojump_clock, fake
):
    """The coordinator stops answering at t=3.5: after session.timeout.ms without an answered
    heartbeat the member drops its partitions (the group has given them to someone else by
    then); when the coordinator answers again the member rejoins and gets them back.
    (Before this was tested the member kept its partitions for as long as the coordinator
    was away.)"""
    listener = Listener()
    silent = {HEARTBEAT: HANG, FIND_COORDINATOR: HANG, JOIN_GROUP: HANG}
    normal = {key: fake.handlers[key] for key in silent}
    async with Consumer(fake.bootstrap, GROUP_CONFIG, open_stream=fake.open_stream,
                        on_assigned=listener.assigned, on_revoked=listener.revoked) as consumer:
        consumer.subscribe(["t"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_forever, consumer)
            await trio.sleep(3.5)
            last_answered = fake.times(HEARTBEAT)[-1]
            for key in silent:
                fake.handlers[key] = lambda req: HANG
            await trio.sleep(10)
            assert consumer.assignment() == set()
            for key, handler in normal.items():
                fake.handlers[key] = handler
            # Requests already sent on the frozen connections stay unanswered; the client
            # gives up on them (a JoinGroup after max.poll.interval.ms + 5 s, as Kafka's)
            # and asks again on new connections.
            await trio.sleep(310)
            assert consumer.assignment() == {("t", 0)}
            nursery.cancel_scope.cancel()
    revoked = [t for t, kind, _ in listener.events if kind == "revoked"]
    assert revoked[0] == pytest.approx(last_answered + 6.0, abs=EPS)
    assert [kind for _, kind, _ in listener.events][:3] == ["assigned", "revoked", "assigned"]


async def test_a_rebalance_longer_than_the_session_timeout_is_not_a_lost_session(
    autojump_clock, fake
):
    """The coordinator holds the second JoinGroup for 20 s (waiting for other members, as
    it may for the rebalance timeout): no heartbeats are due meanwhile, the session is not
    declared lost, and heartbeats resume in the new generation."""
    answers = [{}, {"error_code": REBALANCE_IN_PROGRESS}]
    normal_join = fake.join_group

    def heartbeat(req):
        return answers.pop(0) if answers else {}

    async def join(req):
        if fake.generation == 1:
            await trio.sleep(20)
        return normal_join(req)

    fake.handlers[HEARTBEAT] = heartbeat
    fake.handlers[JOIN_GROUP] = join
    listener = Listener()
    async with Consumer(fake.bootstrap, GROUP_CONFIG, open_stream=fake.open_stream,
                        on_assigned=listener.assigned, on_revoked=listener.revoked) as consumer:
        consumer.subscribe(["t"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll_forever, consumer)
            await trio.sleep(30)
            nursery.cancel_scope.cancel()
        assert consumer.assignment() == {("t", 0)}
    joins = fake.times(JOIN_GROUP)
    beats = fake.times(HEARTBEAT)
    assert len(joins) == 2
    assert not [t for t in beats if joins[1] < t < joins[1] + 20]
    assert [t for t in beats if t > joins[1] + 20]
    assert [kind for _, kind, _ in listener.events][:3] == ["assigned", "revoked", "assigned"]


# -- fetcher: backoff after partition errors -----------------------------------------------------


async def test_fetcher_backs_off_after_a_retriable_partition_error(autojump_clock, fake):
    errors_left = [NOT_LEADER_OR_FOLLOWER] * 3
    normal_fetch = fake.fetch

    async def fetch(req):
        if not errors_left:
            return await normal_fetch(req)
        code = errors_left.pop(0)
        return {"error_code": 0, "responses": [
            {"topic": t.topic, "partitions": [
                {"partition_index": p.partition, "error_code": code, "high_watermark": -1,
                 "records": None}
                for p in t.partitions
            ]}
            for t in req.topics
        ]}

    fake.handlers[FETCH] = fetch
    config = {"retry.backoff.ms": 250, "fetch.max.wait.ms": 500, "auto.offset.reset": "earliest"}
    async with Consumer(fake.bootstrap, config, open_stream=fake.open_stream) as consumer:
        consumer.assign([("t", 0)])
        with trio.move_on_after(5):
            await poll_forever(consumer)
    fetches = fake.times(FETCH)
    # After each error answer the next Fetch waits retry.backoff.ms (no tight loop); after
    # that the broker's long poll (fetch.max.wait.ms) paces them.
    assert [round(g, 6) for g in gaps(fetches)[:3]] == [0.25, 0.25, 0.25]
    assert all(g == pytest.approx(0.5, abs=EPS) for g in gaps(fetches)[3:])
    # Each NOT_LEADER sends the fetcher to metadata for the new leader.
    assert len([t for t in fake.times(METADATA) if fetches[0] <= t <= fetches[3]]) >= 1


async def test_broker_dropping_the_connection_fails_the_request_at_once(autojump_clock, fake):
    """CLOSE (the broker hangs up mid-request) is a connection error at once, not a wait for
    request.timeout.ms; the retry goes over a new connection."""
    answers = [CLOSE]

    def produce(req):
        return answers.pop(0) if answers else fake.produce(req)

    fake.handlers[PRODUCE] = produce
    config = {"linger.ms": 0, "retry.backoff.ms": 100, "retry.backoff.max.ms": 100}
    async with Producer(fake.bootstrap, config, open_stream=fake.open_stream) as producer:
        meta = await (await producer.send("t", b"v")).wait()
    first, second = (r for r in fake.received if r.api_key == PRODUCE)
    assert second.time - first.time == pytest.approx(0.1, abs=EPS)
    assert second.connection != first.connection and meta.offset == 0
