"""The share service inside a real Broker (trio, real data directory): acknowledgements that
arrive together are written to ``__share_group_state`` together (one append and one fsync
for all of them, the broker's group commit), and the durable state is what a new Broker on
the same directory reads back."""

from __future__ import annotations

import trio

from databus.broker.broker import Broker
from databus.broker.config import BrokerConfig
from databus.broker.share.group_state import HeartbeatRequest
from databus.broker.share.service import AckBatch
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.share_group_state import SHARE_STATE_TOPIC
from databus.protocol.records import build_batch

RECORDS = 200


def make_broker(tmp_path) -> Broker:
    return Broker(BrokerConfig(**{"log.dirs": str(tmp_path / "data"),
                                  "listeners": "127.0.0.1:0"}))


def state_records(broker: Broker) -> int:
    return sum(broker.get_log(SHARE_STATE_TOPIC, p).log_end_offset
               for p in range(broker.shares.num_partitions))


def test_concurrent_acknowledgements_share_one_write_and_one_fsync(tmp_path):
    async def main():
        broker = make_broker(tmp_path)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            info = broker.create_topic("jobs", 1)
            service = broker.shares
            members = [f"m{i}" for i in range(4)]
            for member in members:
                result = service.heartbeat(HeartbeatRequest("g", member, 0, ("jobs",)))
                assert result.error == ErrorCode.none
            sessions = [service.session_for("g", m, 0, may_open=True) for m in members]
            for session in sessions:
                session.partitions.add((info.topic_id, 0))
            service.acquire(sessions[0], 10, 1 << 20, set())  # fixes the start offset: 0
            await service.persist()
            broker.append("jobs", 0, build_batch(
                [(None, b"%d" % i, (), 0) for i in range(RECORDS)]))
            held = {}
            for session in sessions:
                for result in service.acquire(session, RECORDS // 4, 1 << 20, set()):
                    held[session.member_id] = [
                        o for r in result.acquired
                        for o in range(r.first_offset, r.last_offset + 1)]
            assert sorted(o for offsets in held.values() for o in offsets) == list(
                range(RECORDS))
            writes, records, fsyncs = (service.writes, state_records(broker),
                                       broker.group_commit.rounds)

            async def ack_one(member: str, offset: int) -> None:
                assert service.acknowledge("g", member, info.topic_id, 0,
                                           [AckBatch(offset, offset, (1,))]) == ErrorCode.none
                assert await service.persist() == ErrorCode.none

            async with trio.open_nursery() as acks:
                for member, offsets in held.items():
                    for offset in offsets:
                        acks.start_soon(ack_one, member, offset)
            # 200 acknowledgements, each answered only once durable: one round wrote them all
            assert service.writes - writes == 1
            assert state_records(broker) - records == 1  # one share-partition snapshot
            assert broker.group_commit.rounds - fsyncs <= 2
            sp = next(iter(service.partitions.values()))
            assert sp.start_offset == RECORDS and sp.in_flight() == 0
            nursery.cancel_scope.cancel()

        # a new Broker on the same directory reads the state back
        again = make_broker(tmp_path)
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            (state,) = again.shares.durable.values()
            assert (state.start_offset, state.batches) == (RECORDS, ())
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_replay_skips_a_bad_record_and_keeps_the_rest(tmp_path):
    async def main():
        broker = make_broker(tmp_path)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            info = broker.create_topic("jobs", 1)
            service = broker.shares
            service.heartbeat(HeartbeatRequest("g", "m", 0, ("jobs",)))
            session = service.session_for("g", "m", 0, may_open=True)
            session.partitions.add((info.topic_id, 0))
            service.acquire(session, 10, 1 << 20, set())  # fixes the start offset: 0
            await service.persist()
            broker.append("jobs", 0, build_batch([(None, b"x", (), 0)] * 3))
            (result,) = service.acquire(session, 10, 1 << 20, set())
            assert [(r.first_offset, r.last_offset) for r in result.acquired] == [(0, 2)]
            partition = service._state_partition("g")
            await broker.append_durably(SHARE_STATE_TOPIC, partition,
                                        build_batch([(b"\x00\x07junk", b"junk", (), 0)]))
            nursery.cancel_scope.cancel()
        again = make_broker(tmp_path)
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            (state,) = again.shares.durable.values()
            # the start offset chosen at the first fetch (the log end then: 0) survived the
            # junk record; acquiring alone wrote nothing, so 0-2 are simply not done yet
            assert (state.start_offset, state.batches) == (0, ())
            nursery.cancel_scope.cancel()

    trio.run(main)
