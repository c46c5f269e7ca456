"""Transactional (half) messages with check-back, end to end: apps use
``client.transaction(stream, check=...)`` through a real sidecar against a broker process.

Committed messages reach the topic, rolled-back ones never; an app killed (SIGKILL) in the
middle of a transaction leaves it to the check-back, answered by another app of the same
producer group; a transaction nobody can answer for is rolled back after ``max.checks``.
Every read ends on a message written after the others were settled, so "never" is checked
on a read that went past them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import trio

from databus import Client
from tests.helpers.revoked import NotesRevoked

from .harness import broker_process, consume_all, running_sidecar, short_tmpdir, sidecar_config

BROKER = {"group.initial.rebalance.delay.ms": 0}
TXN = {"enabled": True, "check.ms": 300, "max.checks": 2}

DYING_APP = textwrap.dedent("""
    import os, signal, sys
    from databus import Client
    client = Client(sys.argv[1])
    tx = client.transaction("pay", group="shop")
    tx.send(b"decided-by-check").result(10)
    print(tx.id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # dies before commit or rollback
""")


def run_apps(path: str, half_service) -> tuple[str, list[str]]:
    asked: list[str] = []
    with Client(path) as client, Client(path) as survivor:
        client.send("pay", b"first").result(10)
        with client.transaction("pay") as tx:
            tx.send(b"committed-1", key=b"k")
            tx.send(b"committed-2", headers={"h": b"v"})
        try:
            with client.transaction("pay") as tx:
                tx.send(b"rolled-back")
                raise RuntimeError("the local transaction failed")
        except RuntimeError:
            pass
        # another app of producer group "shop" answers check-backs: commit
        survivor.transaction("pay", check=lambda txn: asked.append(txn) or True,
                             group="shop")
        dying = subprocess.run([sys.executable, "-c", DYING_APP, path], capture_output=True,
                               text=True, timeout=60)
        assert dying.returncode == -signal.SIGKILL, dying.stderr
        txn_id = dying.stdout.strip()
        # nobody answers for group "orphans": rolled back after max.checks
        orphan = client.transaction("pay", group="orphans")
        orphan.send(b"orphaned").result(10)
        # the survivor stays until everything is settled; then a last plain message
        deadline = time.monotonic() + 30
        while (half_service.committed < 2 or half_service.rolled_back < 2) and (
                time.monotonic() < deadline):
            time.sleep(0.05)
        client.send("pay", b"last").result(10)
        return txn_id, asked


async def test_commit_rollback_check_back_and_abandoned_transactions():
    with short_tmpdir() as tmp:
        async with broker_process(os.path.join(tmp, "data"), **BROKER) as (bootstrap, _proc):
            config = sidecar_config(tmp, clusters={"main": {"bootstrap.servers": bootstrap}},
                                    streams={"pay": {}}, transactions=TXN)
            async with running_sidecar(config) as sidecar:
                path = sidecar.addresses.socket
                (service,) = sidecar.half_services
                txn_id, asked = await trio.to_thread.run_sync(run_apps, path, service)
                got = await trio.to_thread.run_sync(consume_all, bootstrap, "pay", 5, 30)
    values = [value for _p, _o, _k, value, _h in got]
    assert values[0] == b"first" and values[-1] == b"last", values
    assert sorted(values[1:-1]) == [b"committed-1", b"committed-2", b"decided-by-check"]
    assert txn_id in asked  # the survivor was asked about the dead app's transaction
    by_value = {value: (key, headers) for _p, _o, key, value, headers in got}
    assert by_value[b"committed-1"][0] == b"k"
    assert by_value[b"committed-2"][1] == [("h", b"v")]  # only the app's own headers
    assert service.rolled_back == 2 and service.committed == 2


async def test_the_periodic_commit_waits_for_no_write_and_commits_only_what_is_acknowledged():
    """The loop's commit does not flush the producer (a flush stopped the loop, and every
    other partition's work, until the writes in flight were acknowledged): a settled
    transaction whose write has not gone out holds its partition's commit at its first
    message, while another partition's commit moves on; the stop flushes and commits it."""
    from databus.client import Admin, Consumer, Producer
    from databus.sidecar.half.core import COMMIT, HALF_TOPIC, end_headers, half_headers
    from databus.sidecar.half.service import Checkers, HalfService

    held, other = (HALF_TOPIC, 0), (HALF_TOPIC, 1)
    with short_tmpdir() as tmp:
        async with broker_process(os.path.join(tmp, "data"), **BROKER) as (bootstrap, _proc):
            async with Admin(bootstrap) as admin:
                await admin.create_topics({HALF_TOPIC: 2, "pay": 1})
            # the service's writes linger until a flush: only a flush sends them
            service = HalfService("main", bootstrap, Checkers(), group_id="txn-test",
                                  check_ms=60_000, max_checks=1, producer={
                                      "linger.ms": 600_000, "delivery.timeout.ms": 700_000})
            async with trio.open_nursery() as nursery, \
                    Producer(bootstrap, {"linger.ms": 0}) as app, \
                    Consumer(bootstrap, {"group.id": "txn-test"}) as looker:

                async def send(value, headers, partition):  # as an app's sidecar does
                    await (await app.send(HALF_TOPIC, value, None, headers, partition)).wait()

                async def committed(tp):
                    return await looker.committed(tp)

                async def wait_until(predicate):
                    with trio.fail_after(60):
                        while not await predicate():
                            await trio.sleep(0.05)

                await nursery.start(service.run)
                await send(b"paid", half_headers("t1", "shop", "pay", None, ()), 0)
                await send(COMMIT, end_headers("t1", "shop"), 0)

                async def settled():
                    return service.committed == 1
                await wait_until(settled)
                # a transaction on the other partition, read after "t1" was settled: its
                # commit is one the loop made with t1's write still in the producer
                await send(b"x", half_headers("t2", "shop", "pay", None, ()), 1)
                await send(b"rollback", end_headers("t2", "shop"), 1)

                async def other_committed():
                    return await committed(other) == 2
                await wait_until(other_committed)
                assert await committed(held) == 0  # t1's first message: read again if lost
                assert (await looker.end_offsets([("pay", 0)]))[("pay", 0)] == 0
                await service.stop()
                # the stop flushes: t1's message is written, and its partition committed
                assert await committed(held) == 2
                assert (await looker.end_offsets([("pay", 0)]))[("pay", 0)] == 1
                assert service.committed == 1 and service.rolled_back == 1


async def test_members_keep_their_open_transactions_when_another_dies():
    """The group services' consumer defaults (background.CONSUMER_DEFAULTS) hold for the
    half-message service too: with cooperative-sticky, a member that lives keeps its
    partitions, and the open transactions it holds, when another dies (eager range revoked
    everything and every member read its open transactions again), takes the dead one's
    partitions, and settles its own transaction when the end record comes."""
    from databus.client import Admin, Producer
    from databus.sidecar.half.core import COMMIT, HALF_TOPIC, end_headers, half_headers
    from databus.sidecar.half.service import Checkers, HalfService

    class Watched(NotesRevoked, HalfService):
        pass

    def member():  # the session lowered so that the test need not wait 6 s
        return Watched("main", bootstrap, Checkers(), group_id="txn-share", check_ms=60_000,
                       max_checks=1, consumer={"session.timeout.ms": 1500})

    async def until(predicate):
        with trio.fail_after(60):
            while not predicate():
                await trio.sleep(0.05)

    with short_tmpdir() as tmp:
        async with broker_process(os.path.join(tmp, "data"), **BROKER,
                                  **{"group.min.session.timeout.ms": 500}) as (bootstrap, _p):
            async with Admin(bootstrap) as admin:
                await admin.create_topics({HALF_TOPIC: 2, "pay": 1})
            keeper, doomed = member(), member()
            async with trio.open_nursery() as nursery, \
                    Producer(bootstrap, {"linger.ms": 0}) as app:
                nursery.start_soon(keeper.run)
                with trio.CancelScope() as doomed_scope:
                    async with trio.open_nursery() as inner:
                        inner.start_soon(doomed.run)
                        await until(lambda: len(keeper.tracker.next_offsets) == 1
                                    and len(doomed.tracker.next_offsets) == 1)
                        (mine,) = keeper.tracker.next_offsets
                        await (await app.send(HALF_TOPIC, b"paid", None, half_headers(
                            "t1", "shop", "pay", None, ()), mine[1])).wait()
                        await until(lambda: "t1" in keeper.tracker.open)
                        keeper.revoked.clear()
                        doomed_scope.cancel()  # dies: no final commit, no LeaveGroup
                await until(lambda: len(keeper.tracker.next_offsets) == 2)
                assert keeper.revoked == [] and "t1" in keeper.tracker.open
                config = keeper._consumer.config  # the defaults under the configuration's
                assert (config.partition_assignment_strategy, config.heartbeat_interval_ms,
                        config.session_timeout_ms) == (("cooperative-sticky",), 500, 1500)
                await (await app.send(HALF_TOPIC, COMMIT, None, end_headers("t1", "shop"),
                                      mine[1])).wait()
                await until(lambda: keeper.committed == 1)
                await keeper.stop()
