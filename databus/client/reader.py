"""Records by offset: ``RecordReader.read({(topic, partition, offset), ...})``, for lookups
(an index query) rather than streams.

A consumer is the wrong tool for a handful of scattered offsets: it joins nothing here but
still buffers, prefetches and reads on from each position.  The reader keeps one ``Cluster``
(metadata, one connection per broker) for its whole life, so a lookup costs only its Fetch
round trips.  A read goes in rounds: one Fetch per leader per round, asking each partition
from its first wanted offset with a small ``partition_max_bytes`` (the broker still returns
the whole batch holding that offset); every wanted offset the answer covers is taken (nearby
offsets share a Fetch), and the next round starts each partition at its next wanted offset.
Only the wanted records are decoded (records.decode_records_at).  An offset the cluster no
longer has (before the log start, removed by compaction, at or past the log end) is absent
from the answer.
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
TP = tuple[str, int]

FIRST_FETCH_BYTES = 16 * 1024
MAX_ATTEMPTS = 5  # per partition per read, for leader moves and lost connections


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
        self._timeout = self.config.request_timeout_ms / 1000
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
        pending: dict[TP, list[int]] = {}
        for topic, partition, offset in locations:
            pending.setdefault((topic, partition), []).append(offset)
        state = _Read({tp: sorted(set(offsets)) for tp, offsets in pending.items()})
        while state.pending:
            by_leader: dict[int, list[TP]] = {}
            for tp in state.pending:
                by_leader.setdefault(await self._leader(tp), []).append(tp)
            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(self._round, leader, tps, state)
        return state.found

    async def _leader(self, tp: TP) -> int:
        leader = self._cluster.leader_for(*tp)
        if leader < 0:
            await self._cluster.wait_for_topic(tp[0], self._timeout)
            await self._cluster.refresh_metadata([tp[0]])
            leader = self._cluster.leader_for(*tp)
            if leader < 0:
                raise errors.LeaderNotAvailableError(f"{tp[0]}-{tp[1]}: no leader")
        return leader

    async def _round(self, leader: int, tps: list[TP], state: _Read) -> None:
        """One Fetch to ``leader``: each partition from its first wanted offset."""
        asked = {tp: (state.pending[tp][0], state.max_bytes.get(tp, FIRST_FETCH_BYTES))
                 for tp in tps}
        try:
            answers = await self._fetch(leader, asked)
        except errors.KafkaError as exc:
            for tp in tps:
                state.retry(tp, exc)
            await self._cluster.refresh_metadata({t for t, _ in tps})
            return
        for tp, (fetch_offset, _) in asked.items():
            answer = answers.get(tp)
            if answer is None:
                state.retry(tp, errors.KafkaError(
                    f"Fetch {tp[0]}-{tp[1]}: the broker's answer left it out"))
            else:
                await self._take(tp, fetch_offset, answer, state)

    async def _take(self, tp: TP, fetch_offset: int, answer, state: _Read) -> None:
        topic, partition = tp
        code = int(answer.error_code)
        if code == ErrorCode.offset_out_of_range:
            # Before the log start (retention), or past the end: keep what is inside.
            start = (await list_offsets(self._cluster, {tp: EARLIEST},
                                        timeout=self._timeout))[tp][0]
            state.keep(tp, [o for o in state.pending[tp] if o >= start]
                       if fetch_offset < start else [])
            return
        if code:
            state.retry(tp, errors.from_code(code, f"Fetch {topic}-{partition}@{fetch_offset}"))
            await self._cluster.refresh_metadata([topic])
            return
        aborted = None
        if self._isolation:
            aborted = [(int(a.producer_id), int(a.first_offset))
                       for a in (getattr(answer, "aborted_transactions", None) or ())]
        records, next_offset = decode_fetched(
            topic, partition, bytes(answer.records or b""), fetch_offset,
            check_crcs=self.config.check_crcs, aborted=aborted, only=set(state.pending[tp]))
        if next_offset == fetch_offset:
            if fetch_offset >= int(answer.high_watermark):
                state.keep(tp, [])  # at the log end: not there (yet)
            else:  # the batch is larger than asked: ask for more
                state.max_bytes[tp] = state.max_bytes.get(tp, FIRST_FETCH_BYTES) * 4
            return
        for record in records:
            state.found[topic, partition, record.offset] = record
        # Below next_offset, an offset not found is not in the log (compacted away).
        state.keep(tp, [o for o in state.pending[tp] if o >= next_offset])

    async def _fetch(self, leader: int, asked: Mapping[TP, tuple[int, int]]) -> dict:
        topics: dict[str, list[dict]] = {}
        for (topic, partition), (offset, max_bytes) in asked.items():
            topics.setdefault(topic, []).append({
                "partition": partition, "fetch_offset": offset,
                "partition_max_bytes": max_bytes, "current_leader_epoch": -1,
                "log_start_offset": -1, "last_fetched_epoch": -1})
        response = await self._cluster.request(leader, ApiKey.FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1,
            "max_bytes": sum(max_bytes for _, max_bytes in asked.values()),
            "isolation_level": self._isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": self.config.client_rack,
        }, timeout=self._timeout)
        errors.raise_for_code(getattr(response, "error_code", 0), f"Fetch from broker {leader}")
        return {(t.topic, int(p.partition_index)): p
                for t in response.responses for p in t.partitions}


class _Read:
    """What one ``read`` still wants, has found, and has learnt per partition."""

    def __init__(self, pending: dict[TP, list[int]]) -> None:
        self.pending = pending
        self.found: dict[Location, ConsumerRecord] = {}
        self.max_bytes: dict[TP, int] = {}
        self.attempts: dict[TP, int] = {}

    def keep(self, tp: TP, offsets: list[int]) -> None:
        if offsets:
            self.pending[tp] = offsets
        else:
            del self.pending[tp]

    def retry(self, tp: TP, exc: errors.KafkaError) -> None:
        self.attempts[tp] = self.attempts.get(tp, 0) + 1
        if not exc.retriable or self.attempts[tp] >= MAX_ATTEMPTS:
            raise exc
