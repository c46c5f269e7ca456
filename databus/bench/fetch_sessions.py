"""``databus bench fetch-sessions``: what a fetch of many idle partitions costs with and
without a fetch session (KIP-227).

One topic of ``--partitions`` partitions, nothing produced; bare Fetch requests (v12,
max_wait 0) over one connection: sessionless full fetches listing every partition, then
incremental fetches of one session (which list nothing and get nothing back).  Each figure
is the mean round trip, the client's encoding and decoding included, and the request and
response sizes.  Starts its own broker unless ``--bootstrap-server`` is given.
"""

from __future__ import annotations

import datetime
import socket
import struct
import sys
import time

from .common import add_broker_options


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--partitions", type=int, default=1000, help="partitions fetched")
    parser.add_argument("--fetches", type=int, default=300, help="fetches timed per mode")
    parser.add_argument("--keep-topic", action="store_true", help="keep the bench topic")


def run(args) -> int:
    from databus.cli_helpers.table import Column, print_table

    from .common import bench_topic, broker_for

    with broker_for(args) as (bootstrap, _cpu), \
            bench_topic(bootstrap, f"bench-fetch-sessions-{time.time_ns()}", args.partitions,
                        args.keep_topic) as topic, _Connection(bootstrap) as conn:
        full = conn.fetch(topic, 0, -1, range(args.partitions))  # warm up
        start = time.perf_counter()
        for _ in range(args.fetches):
            full = conn.fetch(topic, 0, -1, range(args.partitions))
        full_s = (time.perf_counter() - start) / args.fetches
        opened = conn.fetch(topic, 0, 0, range(args.partitions))
        session_id = opened[0].session_id
        start = time.perf_counter()
        for epoch in range(1, args.fetches + 1):
            incremental = conn.fetch(topic, session_id, epoch, ())
        incremental_s = (time.perf_counter() - start) / args.fetches
        if incremental[0].error_code or not session_id:
            raise RuntimeError(f"no fetch session: {incremental[0]}")
    print_table(
        [Column("fetch"), *(Column(h, justify="right") for h in (
            "ms/fetch", "request bytes", "response bytes", "partitions answered"))],
        [("sessionless (full)", f"{full_s * 1000:.2f}", str(full[1]), str(full[2]),
          str(_answered(full[0]))),
         ("incremental (session)", f"{incremental_s * 1000:.2f}", str(incremental[1]),
          str(incremental[2]), str(_answered(incremental[0])))],
        title=f"databus bench fetch-sessions: {args.partitions} idle partitions, "
              f"{args.fetches} fetches each",
    )
    return 0


def _answered(response) -> int:
    return sum(len(t.partitions) for t in response.responses)


class _Connection:
    VERSION = 12

    def __init__(self, bootstrap: str) -> None:
        from databus.protocol.addresses import parse_host_port

        self.sock = socket.create_connection(parse_host_port(bootstrap))
        self.reader = self.sock.makefile("rb", buffering=1 << 20)
        self.correlation = 0

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.reader.close()
        self.sock.close()

    def fetch(self, topic: str, session_id: int, epoch: int, partitions):
        """(response, request bytes, response bytes) of one Fetch."""
        from databus.protocol.api_keys import ApiKey
        from databus.protocol.entities import build
        from databus.protocol.framing import decode_response, encode_request, request_schema

        schema = request_schema(ApiKey.FETCH, self.VERSION)
        module = sys.modules[schema.__module__]
        parts = tuple(build(module.FetchPartition, partition=p, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=-1,
                            log_start_offset=-1) for p in partitions)
        request = build(
            schema, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
            max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
            forgotten_topics_data=(), rack_id="",
            topics=(build(module.FetchTopic, topic=topic, partitions=parts),) if parts else (),
        )
        self.correlation += 1
        frame = encode_request(request, self.correlation, "bench-fetch-sessions")
        self.sock.sendall(frame)
        (size,) = struct.unpack(">i", self.reader.read(4))
        _, response = decode_response(self.reader.read(size), ApiKey.FETCH, self.VERSION)
        return response, len(frame), size + 4
