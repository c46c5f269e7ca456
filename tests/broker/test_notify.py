"""Fetch long-poll wake-ups, watched through the notifier's statistics() record."""

import trio
import trio.testing

from databus.broker.notify import AppendNotifier, AppendNotifierStatistics


async def test_a_waiter_counts_its_partitions_until_an_append_wakes_it(autojump_clock):
    notifier = AppendNotifier()
    woken = []
    async with trio.open_nursery() as nursery:

        async def fetch():
            deadline = trio.current_time() + 30
            woken.append(await notifier.wait_any([("t", 0), ("t", 1)], deadline))

        nursery.start_soon(fetch)
        await trio.testing.wait_all_tasks_blocked()
        assert notifier.statistics() == AppendNotifierStatistics(partitions_waited_on=2)
        notifier.notify(("t", 1))
    assert woken == [True]
    assert notifier.statistics() == AppendNotifierStatistics(partitions_waited_on=0)
