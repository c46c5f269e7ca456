"""Transactions v2 (KIP-890) with our own trio client against a real broker process:
commit, abort and fencing with a kill -9 of the broker in the middle, and the fence v2 adds:
once a transaction has ended, a late batch of its epoch (a zombie's) is refused on the
partition.  Beside it the same client against ``transaction.version=1`` (what librdkafka
speaks either way; its own tests are tests/broker/test_transactions.py), where that late
batch is appended and leaves a transaction hanging: the check tells the two apart."""

from __future__ import annotations

import pytest
import trio
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

from databus.protocol.errors import ErrorCode
from databus.protocol.records import build_batch
from tests.broker.test_api_versions import produce
from tests.broker.test_transactions import OPTIONS, committed, values
from tests.broker.wire import WireClient
from tests.helpers.broker import BrokerProcess

TOPIC = "tx-v2"
CONFIG = {"transactional.id": "v2-app", "retry.backoff.ms": 50}


def producer_epochs(broker) -> dict[int, int]:
    """DescribeProducers of TOPIC-0: producer id -> the epoch the partition knows."""
    with WireClient(broker.bootstrap) as wire:
        response = wire.request(DescribeProducersRequest(
            topics=(TopicRequest(name=TOPIC, partition_indexes=(0,)),)))
    (partition,) = response.topics[0].partitions
    return {p.producer_id: p.producer_epoch for p in partition.active_producers}


def late_batch(broker, producer_id: int, epoch: int, sequence: int) -> ErrorCode:
    """A zombie's transactional batch of ``epoch``, arriving after its transaction ended."""
    batch = build_batch([(None, b"late", (), 1_700_000_000_000)], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, transactional=True)
    with WireClient(broker.bootstrap) as wire:
        response = produce(wire, TOPIC, batch, version=7)
    return response.responses[0].partition_responses[0].error_code


async def _commit_one_then_probe(broker, producer) -> ErrorCode:
    """Commit a transaction of one record; then its epoch's late batch: the answer."""
    producer.begin_transaction()
    await (await producer.send(TOPIC, b"probe")).wait()
    pid, txn_epoch = max((await trio.to_thread.run_sync(producer_epochs, broker)).items())
    await producer.commit_transaction()
    return await trio.to_thread.run_sync(late_batch, broker, pid, txn_epoch, 1)


async def test_v2_commit_abort_and_fencing_across_kill9(tmp_path):
    from databus.client import Producer
    from databus.client.errors import ProducerFencedError

    with BrokerProcess(tmp_path, {**OPTIONS, "transaction.version": 2}) as broker:
        async with Producer(broker.bootstrap, CONFIG) as first:
            await first.init_transactions()
            first.begin_transaction()
            await first.send(TOPIC, b"c1")
            await first.commit_transaction()
            # a transaction open (its record written) across kill -9, then committed: the
            # coordinator's state and the partition's join came back from the logs
            first.begin_transaction()
            await (await first.send(TOPIC, b"survives")).wait()
            await trio.to_thread.run_sync(broker.restart)
            await first.commit_transaction()
            first.begin_transaction()
            await (await first.send(TOPIC, b"aborted")).wait()
            await first.abort_transaction()
            # a new instance takes the transactional id over: the open transaction is
            # aborted and the first instance fenced
            first.begin_transaction()
            await (await first.send(TOPIC, b"zombie")).wait()
            async with Producer(broker.bootstrap, CONFIG) as second:
                await second.init_transactions()
                with pytest.raises(ProducerFencedError):
                    await first.commit_transaction()
                second.begin_transaction()
                await second.send(TOPIC, b"new")
                await second.commit_transaction()
                code = await _commit_one_then_probe(broker, second)
        assert code == ErrorCode.invalid_producer_epoch  # the EndTxn bumped the epoch
        assert await trio.to_thread.run_sync(committed, broker, TOPIC, 4) == [
            b"c1", b"survives", b"new", b"probe"]
        assert await trio.to_thread.run_sync(values, broker, TOPIC, 6) == [
            b"c1", b"survives", b"aborted", b"zombie", b"new", b"probe"]


async def test_v1_broker_keeps_our_client_on_v1(tmp_path):
    from databus.client import Producer

    with BrokerProcess(tmp_path, {**OPTIONS, "transaction.version": 1}) as broker:
        async with Producer(broker.bootstrap, CONFIG) as producer:
            await producer.init_transactions()
            code = await _commit_one_then_probe(broker, producer)
        assert code == ErrorCode.none  # v1: the late batch is appended, a transaction hangs
        assert await trio.to_thread.run_sync(values, broker, TOPIC, 2) == [b"probe", b"late"]
