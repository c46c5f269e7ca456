"""``databus bench groups``: what consumer groups cost the broker's coordinator.

- offset commits, one connection: each OffsetCommit is answered only after its
  ``__consumer_offsets`` batch is fsynced, so this is commit latency = RTT + one fsync;
- offset commits from many connections at once, each for its own group (so spread over the
  partitions of ``__consumer_offsets``: one fsync per partition per flush round) and all
  for one group (one partition: one fsync covers the commits of every connection);
- group formation: KIP-394 JoinGroup twice, then SyncGroup, for a new one-member group
  (``group.initial.rebalance.delay.ms=0`` on the started broker);
- a rebalance of M members: M members in a Stable group all rejoin and sync (as after a
  subscription change): JoinGroup x M parked until the last arrives, then SyncGroup x M.

Requests go through databus's own client connections (databus.client.connection).
"""

from __future__ import annotations

import statistics
import time
from argparse import Namespace
from dataclasses import dataclass

from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode

from .common import add_broker_options

TOPIC = "bench-groups"


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--keep-topic", action="store_true",
                        help="keep the topic the bench created (default: delete it)")
    parser.add_argument("--json", action="store_true",
                        help="print the results as one JSON document")
    parser.add_argument("--commits", type=int, default=2000, help="commits per connection")
    parser.add_argument("--connections", type=int, default=16,
                        help="connections committing at once in the concurrent run")
    parser.add_argument("--groups", type=int, default=300, help="one-member groups to form")
    parser.add_argument("--members", type=int, default=50, help="members of the rebalanced group")
    parser.add_argument("--rebalances", type=int, default=20, help="rebalances to time")


@dataclass
class Row:
    name: str
    operations: int
    seconds: float
    latencies_ms: list[float]

    def p50(self) -> float:
        return statistics.median(self.latencies_ms)

    def p99(self) -> float:
        lat = sorted(self.latencies_ms)
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))]

    def cells(self) -> list[str]:
        return [self.name, f"{self.operations:,}", f"{self.operations / self.seconds:,.0f}",
                f"{self.p50():.2f}", f"{self.p99():.2f}"]


def run(args) -> int:
    import trio

    from databus.bench.common import bench_topic, broker_for
    from databus.cli_helpers.table import Column, print_table

    broker_args = Namespace(
        bootstrap=args.bootstrap,
        broker_option=["group.initial.rebalance.delay.ms=0", *args.broker_option],
    )
    with broker_for(broker_args) as (bootstrap, _cpu), bench_topic(
            bootstrap, f"{TOPIC}-{time.time_ns()}", 1, args.keep_topic) as topic:
        rows = trio.run(_measure, bootstrap, args, topic)
    if args.json:
        from databus.cli_helpers.options import print_json

        print_json({"title": "consumer groups: coordinator costs", "results": [
            {"operation": r.name, "count": r.operations,
             "per_second": r.operations / r.seconds,
             "p50_ms": r.p50(), "p99_ms": r.p99()}
            for r in rows]})
        return 0
    print_table(
        [Column("operation"), *(Column(header, justify="right")
                                for header in ("count", "per second", "p50 ms", "p99 ms"))],
        [row.cells() for row in rows], title="consumer groups: coordinator costs",
    )
    return 0


async def _measure(bootstrap: str, args, topic: str) -> list[Row]:
    import trio

    from databus.client.connection import BrokerConnection
    from databus.protocol.addresses import parse_host_port

    host, port = parse_host_port(bootstrap)
    rows: list[Row] = []
    async with trio.open_nursery() as nursery:
        connections = []
        for i in range(max(args.connections, args.members)):
            conn = BrokerConnection(host, port, client_id=f"bench-{i}",
                                    request_timeout_ms=120_000)
            await conn.connect(nursery)
            connections.append(conn)

        async def commits(conn, group: str, count: int, latencies: list[float]) -> None:
            for i in range(count):
                start = time.perf_counter()
                response = await conn.request(ApiKey.OFFSET_COMMIT, {
                    "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "retention_time": -1,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": 0, "committed_offset": i,
                         "committed_leader_epoch": -1, "committed_metadata": ""}]}],
                })
                latencies.append((time.perf_counter() - start) * 1000)
                assert response.topics[0].partitions[0].error_code == 0

        latencies: list[float] = []
        start = time.perf_counter()
        await commits(connections[0], "bench-commit-1", args.commits, latencies)
        rows.append(Row("offset commit, 1 connection", args.commits,
                        time.perf_counter() - start, latencies))

        latencies = []
        start = time.perf_counter()
        async with trio.open_nursery() as inner:
            for i, conn in enumerate(connections[: args.connections]):
                inner.start_soon(commits, conn, f"bench-commit-c{i}", args.commits, latencies)
        rows.append(Row(f"offset commit, {args.connections} connections, own groups",
                        args.commits * args.connections, time.perf_counter() - start, latencies))

        latencies = []
        start = time.perf_counter()
        async with trio.open_nursery() as inner:
            for conn in connections[: args.connections]:
                inner.start_soon(commits, conn, "bench-commit-shared", args.commits, latencies)
        rows.append(Row(f"offset commit, {args.connections} connections, one group",
                        args.commits * args.connections, time.perf_counter() - start, latencies))

        latencies = []
        start = time.perf_counter()
        for g in range(args.groups):
            t0 = time.perf_counter()
            await _form_group(connections[0], f"bench-form-{g}")
            latencies.append((time.perf_counter() - t0) * 1000)
        rows.append(Row("new group: join x2 + sync", args.groups,
                        time.perf_counter() - start, latencies))

        latencies = []
        members = connections[: args.members]
        member_ids = await _stable_group(members, "bench-rebalance")
        start = time.perf_counter()
        for _ in range(args.rebalances):
            t0 = time.perf_counter()
            member_ids = await _rebalance(members, member_ids, "bench-rebalance")
            latencies.append((time.perf_counter() - t0) * 1000)
        rows.append(Row(f"rebalance of {args.members} members", args.rebalances,
                        time.perf_counter() - start, latencies))

        for conn in connections:
            await conn.aclose()
        nursery.cancel_scope.cancel()
    return rows


def _join_fields(group: str, member_id: str, round_: int) -> dict:
    # The subscription bytes change every round, as after a subscription change: that makes
    # a Stable group rebalance when its members rejoin.
    return {
        "group_id": group, "session_timeout": 30_000, "rebalance_timeout": 60_000,
        "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": round_.to_bytes(8, "big")}],
        "reason": None,
    }


async def _join(conn, group: str, member_id: str = "", round_: int = 0):
    fields = _join_fields(group, member_id, round_)
    response = await conn.request(ApiKey.JOIN_GROUP, fields, timeout=120)
    if response.error_code == ErrorCode.member_id_required:  # KIP-394: come back with the id
        response = await conn.request(ApiKey.JOIN_GROUP,
                                      {**fields, "member_id": response.member_id},
                                      timeout=120)
    if response.error_code != 0:
        raise RuntimeError(f"JoinGroup of {group}: error {response.error_code}")
    return response


async def _sync(conn, group: str, response) -> None:
    assignments = [{"member_id": m.member_id, "assignment": b""} for m in response.members]
    sync = await conn.request(ApiKey.SYNC_GROUP, {
        "group_id": group, "generation_id": response.generation_id,
        "member_id": response.member_id, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range", "assignments": assignments,
    }, timeout=120)
    if sync.error_code != 0:
        raise RuntimeError(f"SyncGroup of {group}: error {sync.error_code}")


async def _form_group(conn, group: str) -> None:
    await _sync(conn, group, await _join(conn, group))


async def _stable_group(members, group: str) -> list[str]:
    """Grow the group one member at a time; every existing member rejoins each time.

    The newcomer first gets its id (KIP-394's MEMBER_ID_REQUIRED) so that the coordinator
    knows it is coming before the others rejoin: otherwise they could complete a generation
    without it, and the next one would wait for them until their session expired.
    """
    member_ids: list[str] = []
    for k in range(1, len(members) + 1):
        first = await members[k - 1].request(ApiKey.JOIN_GROUP, _join_fields(group, "", k))
        if first.error_code != ErrorCode.member_id_required:
            raise RuntimeError(f"JoinGroup of {group}: expected MEMBER_ID_REQUIRED, got "
                               f"{first.error_code}")
        member_ids = await _rebalance(members[:k], member_ids + [first.member_id], group, k)
    return member_ids


_round = iter(range(10**6, 10**9))


async def _rebalance(members, member_ids: list[str], group: str, round_: int | None = None):
    """Every member rejoins with new metadata and syncs; returns the member ids."""
    import trio

    round_ = next(_round) if round_ is None else round_
    responses: dict[int, object] = {}

    async def join(i: int) -> None:
        responses[i] = await _join(members[i], group, member_ids[i], round_)

    async with trio.open_nursery() as nursery:
        for i in range(len(members)):
            nursery.start_soon(join, i)
    generations = {r.generation_id for r in responses.values()}
    assert len(generations) == 1, f"members answered in different generations: {generations}"
    async with trio.open_nursery() as nursery:
        for i in range(len(members)):
            nursery.start_soon(_sync, members[i], group, responses[i])
    return [responses[i].member_id for i in range(len(members))]
