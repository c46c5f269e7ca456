"""buffer.memory's waits (budget.py) and the config file poller (reload.py) on trio's
virtual clock: deadlines and intervals are exact, and the tests take no wall-clock time."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

from databus.service.reload import poll_file
from databus.sidecar.produce.budget import ByteBudget


async def test_a_waiter_gives_up_exactly_at_its_deadline(autojump_clock):
    budget = ByteBudget(100)
    assert budget.try_acquire(80)
    start = trio.current_time()
    # max.block.ms = 300 from the message's arrival: nothing is released, so it gives up.
    assert await budget.acquire(30, start + 0.3) is False
    assert trio.current_time() - start == pytest.approx(0.3)
    assert budget.used == 80 and budget.statistics().waiting == 0


async def test_a_release_before_the_deadline_lets_the_waiter_in(autojump_clock):
    budget = ByteBudget(100)
    budget.try_acquire(80)
    start = trio.current_time()
    got = []

    async def waiter():
        taken = await budget.acquire(30, start + 1.0)
        got.append((taken, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(0.25)
        assert budget.statistics().waiting == 1
        budget.release(50)
    assert got == [(True, pytest.approx(0.25))]  # woken by the release, not by a poll
    assert budget.used == 60


async def test_a_waiter_cancelled_from_outside_leaves_no_place_and_no_bytes(autojump_clock):
    budget = ByteBudget(100)
    budget.try_acquire(100)
    got = []

    async def waiter(n):
        got.append(await budget.acquire(n, trio.current_time() + 10))

    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as doomed:  # the big one's connection goes away
            doomed.start_soon(waiter, 90)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(waiter, 20)
            await trio.testing.wait_all_tasks_blocked()
            doomed.cancel_scope.cancel()
        budget.release(20)  # room for the small one, no longer behind the big one
    assert got == [True] and budget.used == 100 and budget.statistics().waiting == 0


async def test_waiters_are_served_in_arrival_order_so_a_big_one_is_not_starved(autojump_clock):
    budget = ByteBudget(100)
    budget.try_acquire(100)
    order = []

    async def waiter(name, n):
        if await budget.acquire(n, trio.current_time() + 10):
            order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "big", 90)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(3):
            nursery.start_soon(waiter, f"small{i}", 10)
            await trio.testing.wait_all_tasks_blocked()
        # Room for a small one appears first: it must not jump the big one's place.
        budget.release(10)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        budget.release(90)
        await trio.testing.wait_all_tasks_blocked()
        # (Tasks woken together run in any order: compare sets.)
        assert set(order) == {"big", "small0"} and budget.statistics().waiting == 2
        budget.release(90)  # the big one's bytes come back: room for both others
    assert set(order[2:]) == {"small1", "small2"}
    assert budget.used == 30


async def test_a_message_bigger_than_the_whole_budget_never_waits(autojump_clock):
    budget = ByteBudget(100)
    start = trio.current_time()
    assert await budget.acquire(101, start + 60) is False
    assert trio.current_time() == start


def _rewrite(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # as editors save: a new inode


async def test_the_poller_reloads_once_per_change_at_its_interval(autojump_clock, tmp_path):
    path = tmp_path / "sidecar.yaml"
    path.write_text("a: 1\n")
    start = trio.current_time()
    seen = []

    async def on_change():
        seen.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll_file, path, lambda: 0.5, on_change)
        await trio.sleep(2.1)
        assert seen == []  # nothing changed: four polls, no reload
        _rewrite(path, "a: 2\n")
        await trio.sleep(1.0)
        assert seen == [pytest.approx(2.5)]  # the next poll after the change
        os.unlink(path)  # a missing file is not a change: the config in use stays
        await trio.sleep(1.0)
        _rewrite(path, "a: 3\n")  # at 4.1
        await trio.sleep(0.5)
        assert seen == [pytest.approx(2.5), pytest.approx(4.5)]
        nursery.cancel_scope.cancel()


async def test_watching_off_sees_nothing_until_turned_back_on(autojump_clock, tmp_path):
    path = tmp_path / "sidecar.yaml"
    path.write_text("a: 1\n")
    interval = {"s": 0.0}  # reload_poll_ms: 0
    start = trio.current_time()
    seen = []

    async def on_change():
        seen.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll_file, path, lambda: interval["s"], on_change)
        await trio.testing.wait_all_tasks_blocked()
        _rewrite(path, "a: 2\n")
        await trio.sleep(10.5)
        assert seen == []
        interval["s"] = 0.2  # a SIGHUP reload turned it back on
        await trio.sleep(1.3)
        # Looked at again on the next whole second, then after 0.2 s: the change made
        # while watching was off is seen then.
        assert seen == [pytest.approx(11.2)]
        nursery.cancel_scope.cancel()
