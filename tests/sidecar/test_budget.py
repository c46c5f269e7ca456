"""The sidecar's buffer.memory budget, watched through its statistics() record."""

import trio
import trio.testing

from databus.sidecar.produce.budget import ByteBudget, ByteBudgetStatistics


async def test_statistics_show_bytes_taken_and_messages_waiting(autojump_clock):
    budget = ByteBudget(100)
    assert await budget.acquire(80, deadline=trio.current_time() + 1)
    assert budget.statistics() == ByteBudgetStatistics(used=80, limit=100, waiting=0)
    async with trio.open_nursery() as nursery:
        got = []

        async def wait_for_50():
            got.append(await budget.acquire(50, deadline=trio.current_time() + 10))

        nursery.start_soon(wait_for_50)
        await trio.testing.wait_all_tasks_blocked()
        assert budget.statistics() == ByteBudgetStatistics(used=80, limit=100, waiting=1)
        budget.release(80)
    assert got == [True]
    assert budget.statistics() == ByteBudgetStatistics(used=50, limit=100, waiting=0)
