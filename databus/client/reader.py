"""Records by offset: ``RecordReader.read({(topic, partition, offset), ...})``, for lookups
(an index query) rather than streams.

A consumer is the wrong tool for a handful of scattered offsets: it joins nothing here but
still buffers, prefetches and reads on from each position.  The reader keeps one ``Cluster``
(metadata, one connection per broker) for its whole life, so a lookup costs only its Fetch
round trips.  Per partition the wanted offsets are split into runs (offsets closer than
``COALESCE_GAP`` to the previous one share a run); each run is one chain of Fetch requests
with a small ``partition_max_bytes`` (the broker still returns the whole first batch), all
runs concurrently.  Only the wanted records are decoded (records.decode_records_at); a
Fetch that stops short of an offset goes on from the next wanted one.  An offset the cluster
no longer has (before the log start, removed by compaction, at or past the log end) is simply
absent from the answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from . import errors
from .cluster import Cluster
from .config import ConsumerConfig
from .fetcher import ConsumerRecord, decode_fetched
from .offsets import EARLIEST, list_offsets

Location = tuple[str, int, int]  # (topic, partition, offset)

# Offsets of one partition this close share a Fetch (records between are stepped over).
COALESCE_GAP = 256
FIRST_FETCH_BYTES = 16 * 1024
MAX_ATTEMPTS = 5  # per run, for leader moves and lost connections


class RecordReader:
    """``async with RecordReader(bootstrap, config) as reader: await reader.read(...)``.

    ``config`` takes the consumer's keys (``client.id``, ``check.crcs``,
    ``request.timeout.ms``, ``isolation.level``, ...)."""

    def __init__(self, bootstrap_servers: str | Sequence[str],
                 config: Mapping[str, Any] | ConsumerConfig | None = None, *,
                 open_stream=None) -> None:
        self.config = (config if isinstance(config, ConsumerConfig)
                       else ConsumerConfig.from_kafka(config or {}))
        self._cluster = Cluster(bootstrap_servers, self.config, open_stream=open_stream)
        self._isolation = 1 if self.config.isolation_level == "read_committed" else 0
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> RecordReader:
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self._cluster.running())
        return self

    async def __aexit__(self, *exc) -> bool:
        assert self._stack is not None
        await self._stack.aclose()
        return False

    async def read(self, locations: Iterable[Location]) -> dict[Location, ConsumerRecord]:
        """The records at ``locations`` that the cluster has, by location."""
        by_tp: dict[tuple[str, int], list[int]] = {}
        for topic, partition, offset in locations:
            by_tp.setdefault((topic, partition), []).append(offset)
        found: dict[Location, ConsumerRecord] = {}
        timeout = self.config.request_timeout_ms / 1000
        async with trio.open_nursery() as nursery:
            for tp, offsets in by_tp.items():
                for run in runs(sorted(set(offsets))):
                    nursery.start_soon(self._read_run, tp, run, found, timeout)
        return found

    async def _read_run(self, tp: tuple[str, int], run: list[int], found: dict,
                        timeout: float) -> None:
        topic, partition = tp
        pending = run
        max_bytes = FIRST_FETCH_BYTES
        attempts = 0
        while pending:
            leader = self._cluster.leader_for(topic, partition)
            if leader < 0:
                await self._cluster.wait_for_topic(topic, timeout)
                await self._cluster.refresh_metadata([topic])
                leader = self._cluster.leader_for(topic, partition)
                if leader < 0:
                    raise errors.LeaderNotAvailableError(f"{topic}-{partition}: no leader")
            fetch_offset = pending[0]
            try:
                p = await self._fetch(leader, topic, partition, fetch_offset, max_bytes)
            except errors.KafkaError as exc:
                attempts += 1
                if not exc.retriable or attempts >= MAX_ATTEMPTS:
                    raise
                await self._cluster.refresh_metadata([topic])
                continue
            code = int(p.error_code)
            if code == ErrorCode.offset_out_of_range:
                # Before the log start (retention) or past the end: keep what is inside.
                start = (await list_offsets(self._cluster, {tp: EARLIEST},
                                            timeout=timeout))[tp][0]
                if pending[0] >= start:
                    return  # past the log end: nothing more of this run exists
                pending = [o for o in pending if o >= start]
                continue
            if code:
                attempts += 1
                err = errors.from_code(code, f"Fetch {topic}-{partition}@{fetch_offset}")
                if not err.retriable or attempts >= MAX_ATTEMPTS:
                    raise err
                await trio.sleep(self.config.retry_backoff_ms / 1000)
                await self._cluster.refresh_metadata([topic])
                continue
            wanted = set(pending)
            records, next_offset = decode_fetched(
                topic, partition, bytes(p.records or b""), fetch_offset,
                check_crcs=self.config.check_crcs, only=wanted,
                aborted=[(int(a.producer_id), int(a.first_offset))
                         for a in (getattr(p, "aborted_transactions", None) or ())]
                if self._isolation else None)
            if next_offset == fetch_offset:
                if fetch_offset >= int(p.high_watermark):
                    return  # at the log end: not there (yet)
                max_bytes *= 4  # the batch is larger than asked: ask for more
                continue
            for record in records:
                found[topic, partition, record.offset] = record
            # Below next_offset, an offset not found is not in the log (compacted away).
            pending = [o for o in pending if o >= next_offset]

    async def _fetch(self, leader: int, topic: str, partition: int, offset: int,
                     max_bytes: int):
        response = await self._cluster.request(leader, ApiKey.FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": self._isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": offset,
                "partition_max_bytes": max_bytes, "current_leader_epoch": -1,
                "log_start_offset": -1, "last_fetched_epoch": -1}]}],
            "forgotten_topics_data": [], "rack_id": self.config.client_rack,
        }, timeout=self.config.request_timeout_ms / 1000)
        errors.raise_for_code(getattr(response, "error_code", 0), f"Fetch from broker {leader}")
        for t in response.responses:
            for p in t.partitions:
                if int(p.partition_index) == partition:
                    return p
        raise errors.KafkaError(f"Fetch {topic}-{partition}: the broker's answer left it out")


def runs(offsets: list[int]) -> list[list[int]]:
    """Sorted offsets split where the gap to the previous one is ``COALESCE_GAP`` or more."""
    out: list[list[int]] = []
    for offset in offsets:
        if out and offset - out[-1][-1] < COALESCE_GAP:
            out[-1].append(offset)
        else:
            out.append([offset])
    return out
