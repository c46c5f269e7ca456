"""A scripted one-node Kafka cluster on ``trio.testing`` memory streams, for the timer tests.

The client is given ``broker.open_stream`` as its ``open_stream``: every connection it opens
is one end of ``trio.testing.memory_stream_pair()``, and the other end is served here with
the real wire format (``protocol.framing``: size-prefixed frames, kio schemas), so the
client's connection, sender, fetcher and group code run unchanged.  Nothing touches a
socket or the wall clock, so the tests run on ``autojump_clock`` and read the virtual time
at which each request arrived.

Behaviour is scripted per api key: ``broker.handlers[api_key] = fn(request) -> answer``
(``fn`` may be async, e.g. to hold a Fetch for its max wait).  An answer is a dict of kio
field names (built into the response of the request's version; missing fields are zero),
``HANG`` (never answer: the broker froze) or ``CLOSE`` (drop the connection).  The defaults
answer like a healthy single broker (node 0) that leads every partition and coordinates
every group.  ``broker.refuse = True`` makes new connections fail as a refused TCP connect.
Every request is logged in ``broker.received`` with its arrival time.
"""

from __future__ import annotations

import errno
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
import trio.testing

from databus.client.connection import CLIENT_VERSIONS
from databus.protocol.consumer_protocol import Assignment, encode_assignment
from databus.protocol.entities import build as build_entity
from databus.protocol.framing import FrameBuffer, decode_request, encode_response, response_schema
from databus.protocol.records import iter_headers

HANG = object()
CLOSE = object()

API_VERSIONS, PRODUCE, FETCH, LIST_OFFSETS, METADATA = 18, 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, INIT_PRODUCER_ID = 12, 13, 14, 22


@dataclass
class Received:
    time: float  # trio.current_time() when the request arrived
    api_key: int
    version: int
    body: Any  # the decoded kio request
    connection: int  # index of the connection it came on, in order of opening


class FakeBroker:
    """Run it with ``await nursery.start(broker.run)``; hand ``broker.open_stream`` to the client."""

    node_id = 0
    host, port = "fake-broker", 9092
    bootstrap = f"{host}:{port}"

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.topics = dict(topics or {"t": 1})  # name -> partition count
        self.refuse = False
        self.received: list[Received] = []
        self.connect_attempts: list[float] = []  # times of every open_stream call
        self.next_offset: dict[tuple[str, int], int] = {}
        self.member_id = "member-1"
        self.generation = 0
        self._nursery: trio.Nursery | None = None
        self._connections = 0
        self.handlers: dict[int, Callable[[Any], Any]] = {
            API_VERSIONS: self.api_versions,
            METADATA: self.metadata,
            INIT_PRODUCER_ID: lambda req: {"producer_id": 1000, "producer_epoch": 0},
            PRODUCE: self.produce,
            FETCH: self.fetch,
            LIST_OFFSETS: self.list_offsets,
            FIND_COORDINATOR: lambda req: {
                "node_id": self.node_id, "host": self.host, "port": self.port,
            },
            JOIN_GROUP: self.join_group,
            SYNC_GROUP: self.sync_group,
            HEARTBEAT: lambda req: {},
            LEAVE_GROUP: lambda req: {},
            OFFSET_FETCH: self.offset_fetch,
            OFFSET_COMMIT: self.offset_commit,
        }

    # -- plumbing ------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """The client's ``open_stream``: a memory stream served by this broker."""
        self.connect_attempts.append(trio.current_time())
        if self.refuse or (host, port) != (self.host, self.port):
            raise OSError(errno.ECONNREFUSED, f"connection to {host}:{port} refused")
        client, server = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self._serve, server, self._connections)
        self._connections += 1
        return client

    async def _serve(self, stream: trio.abc.Stream, index: int) -> None:
        frames = FrameBuffer(64 * 1024 * 1024)
        async with stream:
            while data := await stream.receive_some():
                frames.feed(data)
                for frame in frames.frames():
                    header, body = decode_request(frame)
                    self.received.append(
                        Received(trio.current_time(), header.api_key, header.api_version, body, index)
                    )
                    answer = self.handlers[header.api_key](body)
                    if inspect.isawaitable(answer):
                        answer = await answer
                    if answer is HANG:
                        await trio.sleep_forever()
                    if answer is CLOSE:
                        return
                    response = build_entity(
                        response_schema(header.api_key, header.api_version),
                        {"throttle_time": 0, **answer},
                    )
                    try:
                        await stream.send_all(
                            encode_response(
                                header.api_key, header.api_version, header.correlation_id, response
                            )
                        )
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return  # the client hung up first

    def times(self, api_key: int) -> list[float]:
        """Arrival times of every request with ``api_key``."""
        return [r.time for r in self.received if r.api_key == api_key]

    # -- default answers: a healthy single broker ----------------------------------------

    def api_versions(self, req) -> dict:
        return {
            "error_code": 0,
            "api_keys": [
                {"api_key": key, "min_version": lo, "max_version": hi}
                for key, (lo, hi) in CLIENT_VERSIONS.items()
            ],
        }

    def metadata(self, req) -> dict:
        names = sorted(self.topics) if req.topics is None else [t.name for t in req.topics]
        topics = []
        for name in names:
            count = self.topics.get(name)
            topics.append({
                "name": name,
                "error_code": 0 if count else 3,  # UNKNOWN_TOPIC_OR_PARTITION
                "partitions": [
                    {"partition_index": p, "leader_id": self.node_id, "leader_epoch": 0,
                     "replica_nodes": [self.node_id], "isr_nodes": [self.node_id]}
                    for p in range(count or 0)
                ],
            })
        return {
            "brokers": [{"node_id": self.node_id, "host": self.host, "port": self.port}],
            "cluster_id": "fake", "controller_id": self.node_id, "topics": topics,
        }

    def produce(self, req) -> dict:
        """Appends every batch: answers its base offset."""
        responses = []
        for topic in req.topic_data:
            parts = []
            for p in topic.partition_data:
                tp = (topic.name, int(p.index))
                base = self.next_offset.get(tp, 0)
                count = sum(h.last_offset_delta + 1 for _, h in iter_headers(bytes(p.records)))
                self.next_offset[tp] = base + count
                parts.append({"index": tp[1], "error_code": 0, "base_offset": base,
                              "log_append_time": None, "log_start_offset": 0})
            responses.append({"name": topic.name, "partition_responses": parts})
        return {"responses": responses}

    async def fetch(self, req) -> dict:
        """No records ever: holds the Fetch for its max wait, as a broker's long poll."""
        await trio.sleep(req.max_wait.total_seconds())
        return {
            "error_code": 0,
            "responses": [
                {"topic": t.topic, "partitions": [
                    {"partition_index": p.partition, "error_code": 0, "high_watermark": 0,
                     "last_stable_offset": 0, "log_start_offset": 0, "records": b""}
                    for p in t.partitions
                ]}
                for t in req.topics
            ],
        }

    def list_offsets(self, req) -> dict:
        return {"topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1,
                 "offset": 0, "leader_epoch": 0}
                for p in t.partitions
            ]}
            for t in req.topics
        ]}

    def join_group(self, req) -> dict:
        """One member, always the leader; a new generation per join (KIP-394 skipped)."""
        self.generation += 1
        protocol = req.protocols[0]
        return {
            "error_code": 0, "generation_id": self.generation, "protocol_type": "consumer",
            "protocol_name": protocol.name, "leader": self.member_id,
            "member_id": self.member_id,
            "members": [{"member_id": self.member_id, "metadata": protocol.metadata}],
        }

    def sync_group(self, req) -> dict:
        """The leader's plan for this member (the client's own assignor ran)."""
        for a in req.assignments:
            if a.member_id == req.member_id:
                return {"error_code": 0, "assignment": a.assignment}
        return {"error_code": 0, "assignment": encode_assignment(Assignment(()))}

    def offset_fetch(self, req) -> dict:
        return {"error_code": 0, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                 "metadata": "", "error_code": 0}
                for p in t.partition_indexes
            ]}
            for t in req.topics
        ]}

    def offset_commit(self, req) -> dict:
        return {"topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": 0} for p in t.partitions
            ]}
            for t in req.topics
        ]}
