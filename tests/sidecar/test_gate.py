"""The reload gate alone (gate.py), on trio's virtual clock: a swap waits for the frames
routed under the old table, frames that arrive meanwhile wait and get the new one, and a
stop turns waiting frames away."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from databus.sidecar.produce.gate import ReloadGate


async def test_the_hot_path_enters_without_waiting_and_a_closed_gate_refuses():
    gate = ReloadGate("old")
    assert gate.try_enter() == "old"
    assert gate.inside == 1
    gate.leave()
    async with gate.swapping():
        assert gate.try_enter() is None  # closed: the caller takes the waiting path
        gate.current = "new"
    assert gate.try_enter() == "new"
    gate.leave()
    assert gate.inside == 0


async def test_a_swap_waits_for_frames_inside_and_new_frames_wait_for_the_swap(autojump_clock):
    gate = ReloadGate("old")
    log = []

    async def frame(name, hold):
        table = gate.try_enter() or await gate.enter()
        log.append((name, "in", table))
        await trio.sleep(hold)  # routing, waiting for metadata or a producer
        log.append((name, "out", table))
        gate.leave()

    async def reload():
        async with gate.swapping():
            log.append(("reload", "swap"))
            await trio.sleep(1)  # retiring the old producers
            gate.current = "new"
        log.append(("reload", "open"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(frame, "a", 5)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(reload)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(frame, "b", 1)  # arrives while the reload waits for a
        await trio.testing.wait_all_tasks_blocked()
        assert log == [("a", "in", "old")]
        assert gate.closed
    assert log == [
        ("a", "in", "old"),
        ("a", "out", "old"),
        ("reload", "swap"),
        ("reload", "open"),
        ("b", "in", "new"),
        ("b", "out", "new"),
    ]


@pytest.mark.parametrize("seed", range(5))
async def test_ordering_across_reloads_under_load(autojump_clock, seed):
    # Many frames enter and leave at random while reloads swap tables 1, 2, 3...: no frame
    # is inside while a swap body runs, every frame routed under table n left before table
    # n+1 came in, and every frame that entered after a swap began used a newer table.
    rng = random.Random(seed)
    gate = ReloadGate(0)
    swap_running = False
    entered: list[tuple[float, int]] = []  # (when, table)
    left: list[tuple[float, int]] = []
    swaps: list[tuple[float, float, int]] = []  # (began, swapped, new table)
    stop = trio.Event()

    async def app():
        while not stop.is_set():
            table = gate.try_enter()
            if table is None:
                table = await gate.enter()
            assert not swap_running
            entered.append((trio.current_time(), table))
            await trio.sleep(rng.choice([0, 0.001, 0.01, 0.2]))
            left.append((trio.current_time(), table))
            gate.leave()
            await trio.sleep(rng.choice([0, 0.005]))

    async def reloads():
        for n in range(1, 11):
            await trio.sleep(rng.uniform(0.05, 0.5))
            began = trio.current_time()
            nonlocal swap_running
            async with gate.swapping():
                assert gate.inside == 0
                swap_running = True
                await trio.sleep(rng.choice([0, 0.05]))
                gate.current = n
                swaps.append((began, trio.current_time(), n))
                swap_running = False
        stop.set()

    # (Virtual time: a gate that let frames in during a swap would starve it, forever.)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(app)
            nursery.start_soon(reloads)

    assert len(swaps) == 10 and len(entered) > 500
    for began, swapped, n in swaps:
        # Every frame under an older table had left when the table was swapped...
        assert all(when <= swapped for when, table in left if table < n)
        # ... and none entered with an older table once the swap had begun.
        assert all(when <= began for when, table in entered if table < n)
    assert gate.inside == 0 and not gate.closed


async def test_stop_turns_waiting_and_later_frames_away(autojump_clock):
    gate = ReloadGate("t")
    results = []

    async def waiting_frame():
        results.append(await gate.enter())

    gate.try_enter()  # a frame inside keeps the swap waiting
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_swap_until_cancelled, gate)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiting_frame)
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        gate.stop()
        await trio.testing.wait_all_tasks_blocked()
        assert results == [None]
        nursery.cancel_scope.cancel()
    assert await gate.enter() is None
    assert gate.try_enter() is None


async def _swap_until_cancelled(gate):
    async with gate.swapping():
        pass
