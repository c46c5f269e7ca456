"""Records by offset: ``RecordReader.read({(topic, partition, offset), ...})``, for lookups
(an index query) rather than streams.

A consumer is the wrong tool for a handful of scattered offsets: it joins nothing here but
still buffers, prefetches and reads on from each position.  The reader keeps one ``Cluster``
(metadata, one connection per broker) for its whole life, so a lookup costs only its Fetch
round trips.  Per partition the wanted offsets are split into runs (each offset closer than
``COALESCE_GAP`` to the previous one); a read goes in rounds of Fetch requests, all at once,
request j of a leader asking every partition from the first offset of its j-th run with a
small ``partition_max_bytes`` (the broker still returns the whole batch holding it to the
first partition of its response; the others get it only if it fits, else nothing: such a
partition is asked for four times as much next round, up to ``fetch.max.bytes``, then alone
in its requests).  Every wanted offset an answer covers is taken; what a run has left is
asked in the next round.
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
# Offsets of a partition closer than this to the previous one are asked by one Fetch.
COALESCE_GAP = 128
MAX_ATTEMPTS = 5  # per partition per read, for leader moves and lost connections
INT32_MAX = 2**31 - 1  # Fetch's byte limits are int32


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
            # Request j of a leader asks every partition for its j-th run: far-apart offsets
            # of one partition are fetched at once, by requests pipelined on the connection.
            # A partition whose batch never fitted beside the others is asked alone: the
            # first partition of a response always gets a whole batch (Kafka's rule).
            requests: dict[tuple[int, int, TP | None], dict[TP, list[int]]] = {}
            for tp, offsets in state.pending.items():
                leader = await self._leader(tp)
                alone = tp if tp in state.alone else None
                for j, run in enumerate(runs(offsets)):
                    requests.setdefault((leader, j, alone), {})[tp] = run
            async with trio.open_nursery() as nursery:
                for (leader, _j, _alone), asked in requests.items():
                    nursery.start_soon(self._round, leader, asked, state)
            state.next_round()
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

    async def _round(self, leader: int, asked: dict[TP, list[int]], state: _Read) -> None:
        """One Fetch to ``leader``: each partition from the first offset of its run."""
        try:
            answers = await self._fetch(leader, {
                tp: (run[0], state.max_bytes.get(tp, FIRST_FETCH_BYTES))
                for tp, run in asked.items()})
        except errors.KafkaError as exc:
            for tp in asked:
                state.retry(tp, exc)
            await self._cluster.refresh_metadata({t for t, _ in asked})
            return
        for tp, run in asked.items():
            answer = answers.get(tp)
            if answer is None:
                state.retry(tp, errors.KafkaError(
                    f"Fetch {tp[0]}-{tp[1]}: the broker's answer left it out"))
            else:
                await self._take(tp, run, answer, state)

    async def _take(self, tp: TP, run: list[int], answer, state: _Read) -> None:
        topic, partition = tp
        fetch_offset = run[0]
        code = int(answer.error_code)
        if code == ErrorCode.offset_out_of_range:
            # Before the log start (retention), or past the end: keep what is inside.
            start = (await list_offsets(self._cluster, {tp: EARLIEST},
                                        timeout=self._timeout))[tp][0]
            state.resolved(tp, [o for o in run if o < start] if fetch_offset < start else run)
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
            check_crcs=self.config.check_crcs, aborted=aborted, only=set(run))
        if next_offset == fetch_offset:
            if fetch_offset >= int(answer.high_watermark):
                state.resolved(tp, run)  # at the log end: not there (yet)
            else:  # the batch is larger than asked (or than the response had room for)
                state.grow(tp, fetch_offset, int(answer.high_watermark),
                           min(self.config.fetch_max_bytes, INT32_MAX))
            return
        for record in records:
            state.found[topic, partition, record.offset] = record
        # Below next_offset, an offset not found is not in the log (compacted away).
        state.resolved(tp, [o for o in run if o < next_offset])

    async def _fetch(self, leader: int, asked: Mapping[TP, tuple[int, int]]) -> dict:
        topics: dict[str, list[dict]] = {}
        for (topic, partition), (offset, max_bytes) in asked.items():
            topics.setdefault(topic, []).append({
                "partition": partition, "fetch_offset": offset,
                "partition_max_bytes": max_bytes, "current_leader_epoch": -1,
                "log_start_offset": -1, "last_fetched_epoch": -1})
        response = await self._cluster.request(leader, ApiKey.FETCH, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1,
            "max_bytes": min(sum(max_bytes for _, max_bytes in asked.values()), INT32_MAX),
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
        self._done: dict[TP, set[int]] = {}
        self._grown: set[TP] = set()  # this round's
        self.alone: set[TP] = set()
        self._stalled: dict[TP, int] = {}

    def grow(self, tp: TP, offset: int, high_watermark: int, cap: int) -> None:
        """A Fetch at ``offset`` below the high watermark brought no whole batch: ask for
        four times as much next round (once per round, however many of the round's
        requests asked the partition), up to ``cap`` (the consumer's fetch.max.bytes, and
        what the request encodes); then alone in its requests.  Asked alone, the broker
        still sending nothing ``MAX_ATTEMPTS`` rounds running means no progress is
        possible: said once, raised."""
        if tp in self._grown:
            return
        self._grown.add(tp)
        size = self.max_bytes.get(tp, FIRST_FETCH_BYTES)
        if size < cap:
            self.max_bytes[tp] = min(size * 4, cap)
            return
        if tp not in self.alone:
            self.alone.add(tp)
            return
        self._stalled[tp] = self._stalled.get(tp, 0) + 1
        if self._stalled[tp] >= MAX_ATTEMPTS:
            raise errors.KafkaError(
                f"Fetch {tp[0]}-{tp[1]}@{offset}: the broker returned no whole batch below "
                f"its high watermark {high_watermark} in {MAX_ATTEMPTS} Fetches asking this "
                f"partition alone for up to {cap} bytes (fetch.max.bytes): it cannot be "
                "read from this broker")

    def resolved(self, tp: TP, offsets: Iterable[int]) -> None:
        """``offsets`` are found or known to be gone."""
        self._done.setdefault(tp, set()).update(offsets)

    def next_round(self) -> None:
        for tp, done in self._done.items():
            left = [o for o in self.pending[tp] if o not in done]
            if left:
                self.pending[tp] = left
            else:
                del self.pending[tp]
        self._done.clear()
        self._grown.clear()

    def retry(self, tp: TP, exc: errors.KafkaError) -> None:
        self.attempts[tp] = self.attempts.get(tp, 0) + 1
        if not exc.retriable or self.attempts[tp] >= MAX_ATTEMPTS:
            raise exc


def runs(offsets: list[int]) -> list[list[int]]:
    """Sorted offsets split where the gap to the previous one is ``COALESCE_GAP`` or more
    (a run's offsets likely share the batches one Fetch returns)."""
    out: list[list[int]] = []
    for offset in offsets:
        if out and offset - out[-1][-1] < COALESCE_GAP:
            out[-1].append(offset)
        else:
            out.append([offset])
    return out
