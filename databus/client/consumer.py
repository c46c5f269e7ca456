"""The trio-native Kafka consumer.

::

    async with Consumer("localhost:9092", {"group.id": "g", "auto.offset.reset": "earliest"},
                        on_assigned=print, on_revoked=print) as c:
        c.subscribe(["events"])
        while True:
            for record in await c.poll(1.0):      # ConsumerRecord(topic, partition, offset, ...)
                ...

Two modes, as in Kafka: ``subscribe(topics)`` (group membership, group.py; partitions come
from the group's assignor) or ``assign([(topic, partition), ...])`` (manual, no group;
commits still go to ``group.id`` when one is set).  Positions start from the committed
offset, else ``auto.offset.reset`` (earliest / latest / none -> NoOffsetForPartitionError).
``seek``, ``seek_to_beginning``, ``seek_to_end`` take effect on the next poll; ``pause`` /
``resume`` stop and restart fetching of partitions.  With ``enable.auto.commit`` positions
are committed every ``auto.commit.interval.ms``, before partitions are revoked, and on close.

Timeouts of poll/getmany/commit are in seconds (trio's convention).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ..protocol.columns import RecordColumns
from ..protocol.types import TopicPartition
from . import errors
from .backoff import ExponentialBackoff
from .cluster import Cluster
from .config import ConsumerConfig
from .connection import OpenStream
from .fetcher import ConsumerRecord, Fetcher
from .group import GroupMember, call_listener
from .lifecycle import ClientLifecycle
from .offsets import EARLIEST, LATEST, list_offsets
from .subscription import SubscriptionState

log = logging.getLogger(__name__)
_ALL = 2**62  # getmany_columns' default record limit: none

__all__ = ["Consumer", "ConsumerRecord", "ConsumerStatistics"]


@dataclass(frozen=True)
class ConsumerStatistics:
    """``Consumer.statistics()``: a snapshot."""

    assigned_partitions: int
    buffered_records: int  # fetched, not yet returned by poll
    fetches_in_flight: int
    member_id: str | None  # None without a group
    generation_id: int | None


class Consumer(ClientLifecycle):
    """Trio-native Kafka consumer; use as ``async with Consumer(bootstrap, config) as c``.

    ``open_stream(host, port)`` replaces the TCP connect (see connection.OpenStream)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        config: Mapping[str, Any] | ConsumerConfig | None = None,
        *,
        on_assigned: Callable[[list[TopicPartition]], Any] | None = None,
        on_revoked: Callable[[list[TopicPartition]], Any] | None = None,
        open_stream: OpenStream | None = None,
    ) -> None:
        self.config = (
            config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_kafka(config or {})
        )
        self._cluster = Cluster(bootstrap_servers, self.config, open_stream=open_stream)
        self._subscriptions = SubscriptionState()
        self._fetcher = Fetcher(self._cluster, self._subscriptions, self.config)
        self._group: GroupMember | None = None
        if self.config.group_id:
            self._group = GroupMember(
                self._cluster,
                self.config,
                self._subscriptions,
                on_assigned=on_assigned,
                on_revoked=on_revoked,
                before_revoke=self._commit_before_revoke,
            )
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._group_wakeup = trio.Event()
        self._last_committed: dict[TopicPartition, int] = {}

    # -- lifecycle -----------------------------------------------------------------------

    async def _start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self._fetcher.run)
        if self._group is not None:
            nursery.start_soon(self._group_task)
            nursery.start_soon(self._group.heartbeat_loop)
            if self.config.enable_auto_commit:
                nursery.start_soon(self._auto_commit_loop)
        nursery.start_soon(self._metadata_loop)

    async def _settle(self) -> None:
        """close()'s graceful part: commit (with auto commit), leave the group."""
        if self._group is None:
            return
        if self.config.enable_auto_commit:
            try:
                await self._commit_positions()
            except errors.KafkaError as exc:
                log.warning("final auto commit failed: %s", exc)
        if self._subscriptions.uses_group_assignment:
            assigned = self._subscriptions.assigned()
            if assigned:
                await call_listener(self._on_revoked, list(assigned))
            await self._group.leave()

    # -- background tasks ----------------------------------------------------------------

    async def _group_task(self) -> None:
        """Keeps the membership current: (re)joins whenever a rebalance is needed."""
        group = self._group
        while True:
            if (self._subscriptions.uses_group_assignment and group.needs_rejoin
                    and not group.poll_timed_out):
                try:
                    if self._subscriptions.pattern is not None:
                        await self._match_pattern()
                    await group.ensure_active()
                    self._fetcher.notify()
                except errors.AuthenticationError as exc:
                    # the cluster logged it and poll() raises it while it stands: retry
                    log.debug("group %s: %s", group.group_id, exc)
                    await trio.sleep(self.config.retry_backoff_ms / 1000)
                except errors.KafkaError as exc:
                    log.error("group %s: %s", group.group_id, exc)
                    self._fetcher.errors.append(exc)
                    await trio.sleep(self.config.retry_backoff_ms / 1000)
                continue
            with trio.move_on_after(self.config.heartbeat_interval_ms / 1000):
                await self._group_wakeup.wait()
            self._group_wakeup = trio.Event()

    async def _auto_commit_loop(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            try:
                await self._commit_positions()
            except errors.KafkaError as exc:
                log.debug("auto commit failed: %s", exc)

    async def _match_pattern(self) -> bool:
        await self._cluster.refresh_metadata(all_topics=True, allow_auto_create=False)
        names = [n for n, t in self._cluster.topics.items() if not t.error_code and not t.is_internal]
        return self._subscriptions.match_pattern(names)

    async def _metadata_loop(self) -> None:
        while True:
            await trio.sleep(self.config.metadata_max_age_ms / 1000)
            try:
                if self._subscriptions.pattern is not None:
                    if await self._match_pattern() and self._group is not None:
                        self._group.needs_rejoin = True  # the pattern matches other topics now
                        self._group_wakeup.set()
                else:
                    await self._cluster.refresh_metadata()
            except errors.KafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)
            if self._group is not None and self._group.metadata_changed():
                self._group.needs_rejoin = True
                self._group_wakeup.set()

    async def _commit_before_revoke(self, partitions: set[TopicPartition]) -> None:
        if self.config.enable_auto_commit:
            try:
                await self._commit_positions(partitions)
            except errors.KafkaError as exc:
                log.warning("commit before revoke failed: %s", exc)
        self._fetcher.discard(partitions)

    async def _commit_positions(self, only: Iterable[TopicPartition] | None = None) -> None:
        positions = self._subscriptions.positions()
        if only is not None:
            only = set(only)
            positions = {tp: off for tp, off in positions.items() if tp in only}
        changed = {
            tp: (off, None) for tp, off in positions.items() if self._last_committed.get(tp) != off
        }
        if changed:
            await self._group.commit(changed)
            for tp, (off, _) in changed.items():
                self._last_committed[tp] = off

    # -- subscription --------------------------------------------------------------------

    def subscribe(
        self, topics: str | Iterable[str] = (), *, pattern: str | re.Pattern | None = None
    ) -> None:
        """Join ``group.id`` consuming ``topics``, or every topic whose whole name matches
        ``pattern`` (re-checked on each metadata refresh, ``metadata.max.age.ms``);
        partitions arrive with the assignment."""
        if self._group is None:
            raise errors.ConfigError("subscribe() needs group.id; use assign() without a group")
        if pattern is not None:
            self._subscriptions.subscribe_pattern(re.compile(pattern))
            self._group.needs_rejoin = True
            self._group_wakeup.set()
            return None
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics)
        if not topics:
            return self.unsubscribe()
        self._subscriptions.subscribe(topics)
        self._group.needs_rejoin = True
        self._group_wakeup.set()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly ``partitions`` (manual assignment, no group membership)."""
        partitions = [(str(t), int(p)) for t, p in partitions]
        self._subscriptions.assign_manually(partitions)
        self._cluster.wanted_topics.update(t for t, _ in partitions)
        self._fetcher.wakeup()

    def unsubscribe(self) -> None:
        self._fetcher.discard(self._subscriptions.assigned())
        self._subscriptions.unsubscribe()

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assigned()

    def subscription(self) -> tuple[str, ...]:
        return self._subscriptions.topics

    # -- positions -----------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Next poll returns records of ``partition`` from ``offset``."""
        self._subscriptions.seek(partition, offset)
        self._fetcher.discard([partition])

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or self._subscriptions.assigned():
            self._subscriptions.request_reset(tp, EARLIEST)
        self._fetcher.discard(partitions or self._subscriptions.assigned())

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or self._subscriptions.assigned():
            self._subscriptions.request_reset(tp, LATEST)
        self._fetcher.discard(partitions or self._subscriptions.assigned())

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll() will return for ``partition``."""
        await self._update_positions()
        pos = self._subscriptions.state(partition).position
        if pos is None:
            raise errors.NoOffsetForPartitionError(f"no position yet for {partition}")
        return pos

    async def committed(self, partition: TopicPartition) -> int | None:
        if self._group is None:
            raise errors.ConfigError("committed() needs group.id")
        got = await self._group.fetch_committed([partition])
        off = got.get(partition, -1)
        return off if off >= 0 else None

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """{tp: ms} -> {tp: (offset, timestamp) of the first record at/after it, or None}."""
        got = await list_offsets(
            self._cluster, timestamps, timeout=self.config.request_timeout_ms / 1000
        )
        return {tp: (got[tp] if got.get(tp, (-1, -1))[0] >= 0 else None) for tp in timestamps}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        got = await list_offsets(
            self._cluster, {tp: EARLIEST for tp in partitions},
            timeout=self.config.request_timeout_ms / 1000,
        )
        return {tp: off for tp, (off, _) in got.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        got = await list_offsets(
            self._cluster, {tp: LATEST for tp in partitions},
            timeout=self.config.request_timeout_ms / 1000,
        )
        return {tp: off for tp, (off, _) in got.items()}

    async def partitions_for(self, topic: str) -> list[int]:
        return await self._cluster.wait_for_topic(topic, self.config.request_timeout_ms / 1000)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscriptions.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscriptions.state(tp).paused = False
        self._fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._subscriptions.partitions.items() if st.paused}

    async def _update_positions(self) -> None:
        missing = self._subscriptions.missing_positions()
        if not missing:
            return
        targets: dict[TopicPartition, int] = {}
        committed: dict[TopicPartition, int] = {}
        need_committed = [tp for tp in missing if self._subscriptions.partitions[tp].reset_to is None]
        if need_committed and self._group is not None:
            committed = await self._group.fetch_committed(need_committed)
        strategy = self.config.auto_offset_reset
        for tp in missing:
            st = self._subscriptions.partitions.get(tp)
            if st is None or st.position is not None:
                continue  # revoked, or seeked (e.g. by on_assigned) while committed was fetched
            if st.reset_to is not None:
                targets[tp] = st.reset_to
            elif committed.get(tp, -1) >= 0:
                self._subscriptions.seek(tp, committed[tp])
                self._last_committed[tp] = committed[tp]
            elif strategy == "none":
                raise errors.NoOffsetForPartitionError(
                    f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset=none"
                )
            else:
                targets[tp] = EARLIEST if strategy == "earliest" else LATEST
        if targets:
            got = await list_offsets(
                self._cluster, targets, timeout=self.config.request_timeout_ms / 1000,
                isolation_level=self._fetcher._isolation,
            )
            for tp, (offset, _ts) in got.items():
                st = self._subscriptions.partitions.get(tp)
                if st is None or st.position is not None:
                    continue
                if offset < 0:  # a timestamp after the last record: go to the end
                    end = await self.end_offsets([tp])
                    offset = end[tp]
                self._subscriptions.seek(tp, offset)
        self._fetcher.wakeup()

    # -- consuming -----------------------------------------------------------------------

    async def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records ready within ``timeout`` seconds (at most ``max.poll.records``), in offset
        order per partition; [] when none arrived.  Raises errors met while fetching."""
        batches = await self.getmany(timeout=timeout, max_records=max_records)
        return [r for records in batches.values() for r in records]

    async def getmany(
        self, *partitions: TopicPartition, timeout: float = 0.0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Like poll, grouped by partition, optionally limited to ``partitions``."""
        self._fetcher.use_columns(False)
        return await self._drain(partitions, timeout, max_records)

    async def getmany_columns(
        self, *partitions: TopicPartition, timeout: float = 0.0, max_records: int | None = None
    ) -> dict[TopicPartition, RecordColumns]:
        """Like getmany, but each partition's records as columns (a RecordColumns: offsets,
        timestamps, keys, values, headers in buffers, ``to_arrow()`` for a pyarrow
        RecordBatch; ``arrow_table(result.values())`` for one Table): fetched batches are
        decoded straight into them, no Python object per record.  One RecordColumns per
        partition: the rest of one fetch of it, or at most ``max_records`` records in all
        when given (not ``max.poll.records``: a column batch costs the same to hand out
        whatever its length, so it is as long as a fetch makes it).  A consumer switching
        between getmany and getmany_columns fetches what it had buffered again."""
        self._fetcher.use_columns(True)
        return await self._drain(partitions, timeout, max_records or _ALL)

    async def _drain(self, partitions, timeout: float, max_records: int | None) -> dict:
        self._check_open()
        if self._group is not None:
            self._group.last_poll = trio.current_time()
            if self._group.poll_timed_out:
                self._group.poll_timed_out = False
                self._group_wakeup.set()
        limit = max_records or self.config.max_poll_records
        only = set(partitions) if partitions else None
        with trio.move_on_after(max(timeout, 0)):
            while True:
                self._raise_errors()
                # A refused login, raised at once as Java's consumer does; the background
                # tasks keep reconnecting, so a fixed credential makes poll work again.
                auth = self._cluster.authentication_error()
                if auth is not None:
                    raise auth
                if self._group is not None and self._group.last_error is not None:
                    err = self._group.last_error
                    if not err.retriable and not isinstance(
                        err, (errors.UnknownMemberIdError, errors.IllegalGenerationError,
                              errors.RebalanceInProgressError, errors.MemberIdRequiredError)
                    ):
                        self._group.last_error = None
                        raise err
                try:
                    await self._update_positions()
                except errors.KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.debug("position lookup failed: %s", exc)
                out = self._fetcher.drain(limit, only)
                if out:
                    return out
                await self._fetcher.data_ready.wait()
        self._raise_errors()
        return {}

    def _raise_errors(self) -> None:
        errs = self._fetcher.take_errors()
        if errs:
            raise errs[0]

    # -- commits -------------------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, timeout: float | None = None
    ) -> None:
        """Commit ``offsets`` ({tp: next offset to read}) or, by default, the current
        positions of all assigned partitions.  Synchronous: returns once the group stored them.

        As Kafka's commitSync: a retriable failure (the coordinator's connection lost,
        NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
        REQUEST_TIMED_OUT, ...) is retried after ``retry.backoff.ms`` (growing to
        ``retry.backoff.max.ms``), finding the coordinator again, until ``timeout`` seconds
        (default ``default.api.timeout.ms``) have passed; then RequestTimedOutError naming
        the last failure.  Any other error raises at once: ILLEGAL_GENERATION or
        UNKNOWN_MEMBER_ID (Java's CommitFailedException) and REBALANCE_IN_PROGRESS (the member
        rejoins; commit again after it), FENCED_INSTANCE_ID, an authorization error, ..."""
        self._check_open()
        limit = self.config.default_api_timeout_ms / 1000 if timeout is None else timeout
        backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
        failures, last = 0, None
        with trio.move_on_after(limit):
            while True:
                try:
                    await self._commit_once(offsets)
                    return
                except errors.KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                    log.info("group %s: commit failed, retrying: %s", self._group.group_id, exc)
                await trio.sleep(backoff.backoff_ms(failures) / 1000)
                failures += 1
        raise errors.RequestTimedOutError(
            f"group {self._group.group_id!r}: offsets not committed within {limit:g}s "
            f"(default.api.timeout.ms); last error: {last or 'none, the attempt was still running'}"
        )

    async def _commit_once(self, offsets: Mapping[TopicPartition, int] | None) -> None:
        """One OffsetCommit (commit_async's whole commit, as Kafka's commitAsync)."""
        if self._group is None:
            raise errors.ConfigError("commit() needs group.id")
        if offsets is None:
            await self._commit_positions()
        else:
            await self._group.commit({tp: (off, None) for tp, off in offsets.items()})
            self._last_committed.update(offsets)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        callback: Callable[[Mapping[TopicPartition, int] | None, BaseException | None], Any] | None = None,
    ) -> None:
        """Start a commit in the background; ``callback(offsets, error)`` when it is done."""
        self._check_open()

        async def run() -> None:
            error = None
            try:
                await self._commit_once(offsets)
            except errors.KafkaError as exc:
                error = exc
                log.warning("async commit failed: %s", exc)
            if callback is not None:
                try:
                    callback(offsets, error)
                except Exception:
                    log.exception("commit callback %r raised", callback)

        self._nursery.start_soon(run)

    def statistics(self) -> ConsumerStatistics:
        return ConsumerStatistics(
            assigned_partitions=len(self._subscriptions.partitions),
            buffered_records=self._fetcher.buffered_records(),
            fetches_in_flight=len(self._fetcher.in_flight_nodes),
            member_id=self._group.member_id if self._group else None,
            generation_id=self._group.generation_id if self._group else None,
        )
