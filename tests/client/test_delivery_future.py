"""DeliveryFuture, the producer's per-record handle on its batch's shared outcome, without a
cluster: the batch is completed by hand as the producer completes it.  (Also in the
pure-Python subset: tests/protocol/test_speedups.py runs it on the fallback base.)"""

from __future__ import annotations

import gc
import weakref

import pytest
import trio

from databus.client.accumulator import BatchResult
from databus.client.errors import NotLeaderOrFollowerError
from databus.client.producer import DeliveryFuture, RecordMetadata, _complete_batch


def test_metadata_is_the_batch_offset_plus_the_index_made_when_asked():
    batch = BatchResult("t", 2)
    futures = [DeliveryFuture(batch, i, 1000 + i) for i in range(3)]
    assert [(f.topic, f.partition, f.timestamp, f.done()) for f in futures] == [
        ("t", 2, 1000, False), ("t", 2, 1001, False), ("t", 2, 1002, False)]
    with pytest.raises(RuntimeError, match="not complete"):
        futures[0].result()
    with pytest.raises(RuntimeError, match="not complete"):
        futures[0].exception()
    _complete_batch(batch, 500, -1, None)
    assert [f.result() for f in futures] == [RecordMetadata("t", 2, 500 + i, 1000 + i)
                                             for i in range(3)]
    assert futures[1].exception() is None and "offset=501" in repr(futures[1])


def test_log_append_time_acks_zero_and_errors_come_from_the_batch():
    appended, unacked, failed = BatchResult("t", 0), BatchResult("t", 0), BatchResult("t", 0)
    _complete_batch(appended, 10, 77, None)
    _complete_batch(unacked, -1, -1, None)
    error = NotLeaderOrFollowerError("moved")
    _complete_batch(failed, -1, -1, error)
    assert DeliveryFuture(appended, 1, 5).result() == RecordMetadata("t", 0, 11, 77)
    assert DeliveryFuture(unacked, 1, 5).result() == RecordMetadata("t", 0, -1, 5)
    lost = DeliveryFuture(failed, 0, 5)
    assert lost.done() and lost.exception() is error
    with pytest.raises(NotLeaderOrFollowerError, match="moved"):
        lost.result()
    _complete_batch(failed, 3, -1, None)  # a second completion changes nothing
    assert lost.exception() is error


def test_callbacks_run_once_in_record_order_and_a_failing_one_is_logged(caplog):
    batch = BatchResult("t", 0)
    futures = [DeliveryFuture(batch, i) for i in range(3)]
    seen = []
    futures[2].add_done_callback(lambda f: seen.append(2))
    futures[0].add_done_callback(lambda f: 1 / 0)
    futures[0].add_done_callback(lambda f: seen.append(0))
    futures[1].add_done_callback(lambda f: seen.append(f.result().offset))
    _complete_batch(batch, 40, -1, None)
    _complete_batch(batch, 40, -1, None)
    assert seen == [0, 41, 2]
    assert "delivery callback" in caplog.text and "ZeroDivisionError" in caplog.text
    futures[1].add_done_callback(lambda f: seen.append("late"))  # done: runs at once
    assert seen[-1] == "late"


async def test_wait_wakes_every_waiter_of_the_batch():
    batch = BatchResult("t", 0)
    got = []

    async def waiter(i):
        got.append(await DeliveryFuture(batch, i, 9).wait())

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(waiter, i)
        await trio.testing.wait_all_tasks_blocked()
        assert not got
        _complete_batch(batch, 7, -1, None)
    assert sorted(m.offset for m in got) == [7, 8, 9]


def test_a_pending_future_and_its_callback_do_not_leak_as_a_cycle():
    """A callback that holds its future makes a cycle (batch -> callbacks -> future ->
    batch); the collector must be able to free it when the producer is gone."""
    batch = BatchResult("t", 0)
    future = DeliveryFuture(batch, 0, 1)

    def callback(f, keep=future):
        pass

    future.add_done_callback(callback)
    gone = weakref.ref(callback)
    del batch, future, callback
    gc.collect()
    assert gone() is None
