"""Consuming through the sidecar: the trio shell around consume/core.py's MemberCore.

``ConsumeService`` (one per sidecar) keeps one ``Member`` per (stream, group): a consumer
group member of its own, reading the stream's topic and the group's retry topic, shared by
every app on this host that subscribed to that stream in that group.  Apps' frames come in
through ingress.Connection (subscribe, fetch, ack, nack, unsubscribe) and go out as
``subscribed`` / ``messages`` / ``unsubscribed`` frames queued on their sessions.

A member's tasks: the *poll loop* reads records while fewer than ``4 * max.poll.records``
wait in the sidecar (what bounds its memory however slow the apps are); the *dispatch loop*
answers long polls, promotes due retries and expires ack deadlines, sleeping until the core's
next deadline or a wake-up; the *commit loop* commits what the core says is safe every
``auto.commit.interval.ms``, and rebalances commit before giving partitions up.  Retry and
dead-letter copies are written by the member's own producer (acks=all); the original counts
as done only once its copy is acknowledged, so a crash in between redelivers it.

The group is the stream's for this host: a group consumes one stream (RocketMQ's rule that
a group's members subscribe alike), and a second stream or other tags under the same group
are refused with INVALID_SUBSCRIPTION.  A member that fails (its cluster gone for good, a
bug) ends its subscriptions with ``unsubscribed`` carrying the error; the SDK subscribes
again after a backoff.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Hashable
from typing import Any, NamedTuple

import trio

from databus.client import Admin, AuthenticationError, Consumer, KafkaError, Producer, errors
from databus.config import ConfigError, broker_registry_url
from databus.protocol import share_dlq
from databus.protocol import sidecar_wire as wire
from databus.protocol.api_keys import ApiKey
from databus.protocol.sidecar_wire import ErrorCode

from ..typed import TypedReader
from .core import Copy, MemberCore

log = logging.getLogger("databus.sidecar.consume.service")

PENDING_FACTOR = 4  # records waiting in the sidecar per member: up to 4 * max.poll.records
# While the apps are slow, how often the member polls (paused) to stay in its group.
FULL_POLL_S = 1.0
RESOURCE_GROUP = 32  # IncrementalAlterConfigs' resource type of a group (KIP-848/932)


def retry_topic(group: str) -> str:
    return f"{group}.retry"


def dlq_topic(group: str) -> str:
    """The group's dead-letter topic where the sidecar writes dead letters itself."""
    return f"{group}.dlq"


def broker_dlq_topic(group: str) -> str:
    """Queue mode on a KIP-1191 cluster: the share group's dead-letter topic, which the
    broker writes (KIP-1191 wants its name under the broker's ``dlq.`` prefix)."""
    return f"{share_dlq.DLQ_TOPIC_PREFIX}{group}"


def retry_group(group: str) -> str:
    """Queue mode on a share group: the consumer group reading the retry topic (a group id
    names one kind of group, so not the share group's own)."""
    return f"{group}.retry"


class SubscribeError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Member:
    """One group member: see the module docstring."""

    SHARE = False  # a share-group member (ShareMember)

    def __init__(self, service: ConsumeService, stream: str, group: str, topic: str,
                 bootstrap: str, settings: Any, kafka: dict[str, Any], ordering: str,
                 tags: tuple[str, ...] | None, broker_dlq: bool = False) -> None:
        self.service = service
        self.stream = stream
        self.group = group
        self.topic = topic
        self.bootstrap = bootstrap
        self.kafka = kafka
        self.tags = tags
        self.ordering = ordering
        self.core = MemberCore(
            topic, retry_topic(group), ordering=ordering, tags=tags,
            max_attempts=settings.max_attempts, retry_levels_ms=settings.retry_levels_ms,
            ack_timeout_ms=settings.ack_timeout_ms, share=self.SHARE, broker_dlq=broker_dlq,
        )
        # where dead letters go: the broker's DLQ topic of the share group (KIP-1191), which
        # the broker fills with what the member REJECTs and the member with the rest, or
        # the sidecar's own GROUP.dlq
        self.broker_dlq = self.core.broker_dlq
        self.dlq_topic = broker_dlq_topic(group) if self.broker_dlq else dlq_topic(group)
        self.subs: dict[Hashable, tuple[Any, int]] = {}  # key -> (session, subscription id)
        self.ready = trio.Event()
        self.done = trio.Event()
        self.failed: str | None = None
        self._wake = trio.Event()
        self._room = trio.Event()
        self._stop = trio.Event()
        self._source: Any = None  # the Consumer (or ShareConsumer) reading for this member
        # the Consumer whose offsets the member commits: the source itself, or for a share
        # member the one reading the retry topic
        self._offsets: Any = None
        self._commit_interval = 1.0
        self._retries_paused = False
        self._stream_paused = False
        self._producer: Producer | None = None
        self._nursery: trio.Nursery | None = None
        self._max_pending = 0
        self.copies_written = 0
        self.dead_lettered = 0
        self.typed: TypedReader | None = None  # a typed stream's decoding (typed.py)

    # --- from the service ----------------------------------------------------------------

    def kick(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def add_subscriber(self, key: Hashable, session: Any, sub_id: int, window: int) -> None:
        self.subs[key] = (session, sub_id)
        self.core.subscribe(key, window)
        self.kick()

    def remove_subscriber(self, key: Hashable) -> None:
        self.subs.pop(key, None)
        if self.core.unsubscribe(key):
            self.kick()
        if not self.subs:
            self.stop()  # the last app left: commit and leave the group

    def write_copies(self, copies: list[Copy]) -> None:
        if copies and self._nursery is not None:
            self._nursery.start_soon(self._write, copies)

    # --- the service's task ----------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            source = self._make_source()
            producer = Producer(self.bootstrap, {
                "client.id": f"databus-sidecar-{self.group}-retry", "acks": "all",
                "linger.ms": 5,
            })
            async with producer:
                self._producer = producer
                async with Admin(self.bootstrap) as admin:
                    await self._prepare(admin)
                async with contextlib.AsyncExitStack() as stack:
                    for consumer, topics in self._consumers(source):
                        await stack.enter_async_context(consumer)
                        consumer.subscribe(topics)
                    self._source = source
                    async with trio.open_nursery() as nursery:
                        self._nursery = nursery
                        nursery.start_soon(self._poll_loop)
                        nursery.start_soon(self._dispatch_loop)
                        self._background(nursery)
                        started = True
                        self.ready.set()
                        task_status.started()
                        await self._stop.wait()
                        nursery.cancel_scope.cancel()
                    await self._finish()
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            log.error("group %r on stream %r failed: %s", self.group, self.stream, self.failed,
                      exc_info=not isinstance(exc, KafkaError))
            if not started:
                raise
            self._end_subscriptions(ErrorCode.UNKNOWN_SERVER_ERROR, self.failed)
        finally:
            self.ready.set()
            self.service.member_done(self)
            self.done.set()

    # --- what a classic member does (ShareMember overrides these) ---------------------------

    def _make_source(self):
        config = {
            **self.kafka, "group.id": self.group, "enable.auto.commit": False,
            "client.id": f"databus-sidecar-{self.group}",
        }
        consumer = self._offsets = Consumer(self.bootstrap, config, on_revoked=self._revoked)
        self._max_pending = PENDING_FACTOR * consumer.config.max_poll_records
        self._commit_interval = consumer.config.auto_commit_interval_ms / 1000
        return consumer

    def _consumers(self, source) -> list[tuple[Any, list[str]]]:
        """(consumer, topics it subscribes to) for each consumer the member runs."""
        return [(source, [self.topic, self.core.retry_topic])]

    async def _prepare(self, admin: Admin) -> None:
        """The group's retry and dead-letter topics, with the stream topic's partition
        count (so retries spread as the stream does)."""
        await _create_topics(admin, self.topic, [self.core.retry_topic, self.dlq_topic])

    def _background(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._commit_loop, self._commit_interval)

    async def _finish(self) -> None:
        await self._commit()

    def _after_dispatch(self) -> None:
        pass

    def _end_subscriptions(self, code: int, message: str) -> None:
        for key, (session, sub_id) in list(self.subs.items()):
            session.send_frame(wire.unsubscribed(sub_id, code, message))
            self.service.forget(key)
        self.subs.clear()

    async def _poll_loop(self) -> None:
        core = self.core
        while True:
            # Retries waiting for their due time are bounded apart (by pausing the retry
            # topic), so that they never stop the stream's own messages from being read.
            if core.pending - len(core.delayed) >= self._max_pending:
                with trio.move_on_after(FULL_POLL_S):
                    await self._room.wait()
                self._room = trio.Event()
                if core.pending - len(core.delayed) < self._max_pending or self.SHARE:
                    continue  # (a share member's liveness is its heartbeat alone)
                # Still full (the apps are slow): poll the stream's partitions paused, so
                # that this member stays in the group (max.poll.interval.ms) and reads
                # nothing more.
                self._pause_stream(True)
                records = await self._poll(0)
            else:
                self._pause_stream(False)
                if not self.SHARE:  # (a share member's retry loop paces them)
                    self._pace_retries()
                records = await self._poll(1.0)
            if records:
                if self.SHARE:  # (the lock the broker gave the records just acquired)
                    core.lock_ms = self._source.acquisition_lock_timeout_ms
                if self.typed is not None:
                    await self.typed.prepare(records)
                core.add(records, int(time.time() * 1000))
                self._wake.set()

    async def _poll(self, timeout: float, consumer: Any = None) -> list:
        try:
            return await (consumer or self._source).poll(timeout)
        except KafkaError as exc:
            # Refused credentials are waited out too: the client logs them once and logs
            # in again until they are fixed on the cluster (or in the sidecar's config).
            refused = isinstance(exc, AuthenticationError)
            if not exc.retriable and not refused:
                raise
            log.log(logging.DEBUG if refused else logging.WARNING,
                    "group %r: poll failed: %s", self.group, exc)
            await trio.sleep(1.0)
            return []

    def _pause_stream(self, pause: bool) -> None:
        if self.SHARE or (not pause and not self._stream_paused):
            return
        stream = [tp for tp in self._source.assignment() if tp[0] == self.topic]
        if pause:  # again each time: a rebalance may have brought new partitions
            self._source.pause(*stream)
        else:
            self._source.resume(*stream)
        self._stream_paused = pause

    def _pace_retries(self, full: bool = False) -> None:
        """Pause the retry topic while ``max_pending`` retries wait for their due time
        (or, ``full``, while the apps are slow); resume it when half of them went out."""
        if self.SHARE and self._offsets is None:
            return
        waiting = len(self.core.delayed)
        consumer = self._offsets
        retry = [tp for tp in consumer.assignment() if tp[0] == self.core.retry_topic]
        if full or waiting >= self._max_pending:  # again each time: a rebalance may add some
            consumer.pause(*retry)
            self._retries_paused = True
        elif waiting < self._max_pending // 2 and self._retries_paused:
            consumer.resume(*retry)
            self._retries_paused = False
        self._stream_paused = False

    async def _dispatch_loop(self) -> None:
        core = self.core
        subs = self.subs
        while True:
            now = trio.current_time()
            wall_ms = int(time.time() * 1000)
            self.write_copies(core.tick(now, wall_ms))
            for key, entries in core.serve(now, wall_ms):
                target = subs.get(key)
                if target is not None:
                    session, sub_id = target
                    if self.typed is None:  # packed straight from the entries (in C)
                        session.send_encoded(wire.encode_messages(sub_id, entries))
                        continue
                    arrays = [e.wire() for e in entries]
                    for array in arrays:  # a typed stream: values decoded
                        array[5] = self.typed.decode(array[5])
                    session.send_frame(wire.messages(sub_id, arrays))
            self._after_dispatch()
            if core.pending - len(core.delayed) < self._max_pending:
                self._room.set()
            wait = core.next_wakeup(now, wall_ms)
            with trio.move_on_after(math.inf if wait is None else wait):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _commit_loop(self, interval: float) -> None:
        while True:
            await trio.sleep(interval)
            try:
                await self._commit()
            except KafkaError as exc:
                log.warning("group %r: commit failed: %s", self.group, exc)

    async def _commit(self, only: set | None = None) -> None:
        offsets = self.core.committable()
        if only is not None:
            offsets = {tp: off for tp, off in offsets.items() if tp in only}
        if offsets and self._offsets is not None:
            await self._offsets.commit(offsets)
            self.core.mark_committed(offsets)

    async def _revoked(self, partitions) -> None:
        gone = {tuple(tp) for tp in partitions}
        try:
            await self._commit(gone)
        except KafkaError as exc:
            log.warning("group %r: commit before revoke failed: %s", self.group, exc)
        self.core.revoke(gone)
        self._wake.set()

    async def _write(self, copies: list[Copy]) -> None:
        """Write retry / DLQ copies; each original is done once its copy is acknowledged."""
        producer = self._producer
        sent = []
        for copy in copies:
            entry = copy.entry
            topic = self.dlq_topic if copy.dead else self.core.retry_topic
            try:
                future = await producer.send(
                    topic, entry.value, entry.key,
                    copy.headers(self.topic, self.group, kip1191=self.broker_dlq),
                    timestamp_ms=entry.timestamp if entry.timestamp >= 0 else None,
                )
            except KafkaError as exc:
                log.warning("group %r: writing to %s failed: %s", self.group, topic, exc)
                self.core.copy_failed(entry)
                continue
            sent.append((copy, future))
        for copy, future in sent:
            try:
                await future.wait()
            except KafkaError as exc:
                log.warning("group %r: a copy was not written: %s", self.group, exc)
                self.core.copy_failed(copy.entry)
                continue
            self.core.copied(copy.entry, copy.dead)
            self.copies_written += 1
            if copy.dead:
                self.dead_lettered += 1
        self._wake.set()


async def _create_topics(admin: Admin, like: str, names: list[str],
                         configs: dict[str, str] | None = None) -> None:
    """Create ``names`` (if missing) with as many partitions as topic ``like``."""
    await admin.cluster.refresh_metadata([like])
    found = admin.cluster.partitions_for(like)
    partitions = len(found) if found else -1  # not there yet: the broker's num.partitions
    await admin.ensure_topics({name: partitions for name in names}, configs=configs)


async def group_configs(admin: Admin, group: str, names: list[str]) -> dict[str, str]:
    """The values of a group's configs ``names`` (DescribeConfigs on the GROUP resource)."""
    response = await admin.cluster.request(None, ApiKey.DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": RESOURCE_GROUP, "resource_name": group,
                       "configuration_keys": names}],
        "include_synonyms": False, "include_documentation": False,
    })
    (result,) = response.results
    if int(result.error_code):
        raise errors.from_code(result.error_code, result.error_message or "")
    return {c.name: c.value for c in result.configs if c.value is not None}


async def _set_group_configs(admin: Admin, group: str, configs: dict[str, str]) -> None:
    """Set a group's configs (IncrementalAlterConfigs on the GROUP resource, KIP-932)."""
    response = await admin.cluster.request(None, ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{
            "resource_type": RESOURCE_GROUP, "resource_name": group,
            "configs": [{"name": k, "config_operation": 0, "value": v}
                        for k, v in configs.items()],
        }],
        "validate_only": False,
    })
    (result,) = response.responses
    if int(result.error_code):
        raise errors.from_code(result.error_code, result.error_message or "")


class _Ref(NamedTuple):
    """What ShareConsumer.acknowledge needs of a record."""

    topic: str
    partition: int
    offset: int


# The Kafka consumer keys a share consumer takes (the rest are a classic consumer's).
SHARE_CONSUMER_KEYS = ("fetch.min.bytes", "fetch.max.bytes", "fetch.max.wait.ms",
                       "max.poll.records", "check.crcs", "client.rack", "request.timeout.ms",
                       "retry.backoff.ms", "metadata.max.age.ms")
ACK_FLUSH_S = 0.02  # settlements gathered this long go to the broker in one ShareAcknowledge


class ShareMember(Member):
    """Queue mode (``ordering: none``) on a KIP-932 share group named after the app's group:
    the broker hands one partition's records to many members and keeps each record's state.
    An ack becomes ACCEPT; the last attempt is REJECTed, and where the cluster has
    KIP-1191 (``share.version`` >= 2) that is all: the broker copies it to the share group's
    DLQ topic ``dlq.GROUP`` (set as the group's ``errors.deadletterqueue.topic.name``).
    Elsewhere the member copies it to ``GROUP.dlq`` first.
    A nack waits its retry level (consume/core.py's docstring): kept acquired and RELEASEd
    when due if that is within the record's acquisition lock, else copied to
    ``GROUP.retry`` and ACCEPTed.  The retry topic is read as in classic mode, by a
    consumer group ``GROUP.retry`` whose offsets are committed below what is not done yet
    (a share group would take a record waiting longer than its lock back).  A record whose
    app vanished comes back when its acquisition lock expires."""

    SHARE = True

    def _make_source(self):
        from databus.client import ShareConsumer

        config = {k: v for k, v in self.kafka.items() if k in SHARE_CONSUMER_KEYS}
        consumer = ShareConsumer(self.bootstrap, {
            **config, "group.id": self.group, "share.acknowledgement.mode": "explicit",
            "client.id": f"databus-sidecar-{self.group}",
        })
        self._max_pending = PENDING_FACTOR * consumer.config.max_poll_records
        self._acks_waiting = trio.Event()
        self._offsets = Consumer(self.bootstrap, {
            **self.kafka, "group.id": retry_group(self.group), "enable.auto.commit": False,
            "client.id": f"databus-sidecar-{self.group}-retry",
        }, on_revoked=self._revoked)
        self._commit_interval = self._offsets.config.auto_commit_interval_ms / 1000
        return consumer

    def _consumers(self, source) -> list[tuple[Any, list[str]]]:
        return [(source, [self.topic]), (self._offsets, [self.core.retry_topic])]

    async def _prepare(self, admin: Admin) -> None:
        await _create_topics(admin, self.topic, [self.core.retry_topic])
        if self.broker_dlq:
            try:
                await self._prepare_broker_dlq(admin)
            except KafkaError as exc:  # e.g. the broker's DLQ prefix is not ``dlq.``
                log.warning("share group %r: cannot use the broker's dead-letter topic %s "
                            "(%s); writing dead letters to %s", self.group, self.dlq_topic,
                            exc, dlq_topic(self.group))
                self.broker_dlq = self.core.broker_dlq = False
                self.dlq_topic = dlq_topic(self.group)
        if not self.broker_dlq:
            await _create_topics(admin, self.topic, [self.dlq_topic])
        # A new share group starts at the log end by default (share.auto.offset.reset
        # latest); the sidecar's groups start where its classic ones do.
        reset = str(self.kafka.get("auto.offset.reset", "earliest"))
        if reset in ("earliest", "latest"):
            try:
                await _set_group_configs(admin, self.group, {"share.auto.offset.reset": reset})
            except KafkaError as exc:
                log.warning("share group %r: cannot set share.auto.offset.reset: %s",
                            self.group, exc)

    async def _prepare_broker_dlq(self, admin: Admin) -> None:
        """The share group's DLQ topic: the one its ``errors.deadletterqueue.topic.name``
        names if an operator set it, else ``dlq.GROUP``, set so.  The member writes the
        retry topic's last attempts there too, so it creates the topic (as the broker would
        on first use: marked as a share group's DLQ) and has records copied whole
        (``databus dlq replay`` needs their values; KIP-1191's default is headers alone)."""
        named = await group_configs(admin, self.group, [share_dlq.DLQ_TOPIC_CONFIG])
        self.dlq_topic = named.get(share_dlq.DLQ_TOPIC_CONFIG) or self.dlq_topic
        await _create_topics(admin, self.topic, [self.dlq_topic],
                             {share_dlq.DLQ_ENABLE_TOPIC_CONFIG: "true"})
        await _set_group_configs(admin, self.group, {
            share_dlq.DLQ_TOPIC_CONFIG: self.dlq_topic, share_dlq.DLQ_COPY_CONFIG: "true"})

    def _background(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._ack_loop)
        nursery.start_soon(self._retry_poll_loop)
        nursery.start_soon(self._commit_loop, self._commit_interval)

    async def _retry_poll_loop(self) -> None:
        """Read the retry topic (its records wait in the core until due); paused while
        the apps are slow or ``max_pending`` retries wait, like a classic member's."""
        core = self.core
        while True:
            full = core.pending - len(core.delayed) >= self._max_pending
            self._pace_retries(full)
            records = await self._poll(FULL_POLL_S if full else 1.0, self._offsets)
            if records:
                if self.typed is not None:
                    await self.typed.prepare(records)
                core.add(records, int(time.time() * 1000))
                self._wake.set()

    def _after_dispatch(self) -> None:
        settled = self.core.take_settled()
        if not settled:
            return
        acknowledge = self._source.acknowledge
        for entry, kind in settled:
            try:
                acknowledge(_Ref(entry.source[0], entry.source[1], entry.offset), kind)
            except errors.IllegalStateError as exc:
                # Its lock expired and the broker took it back: delivered again elsewhere.
                log.debug("share group %r: %s", self.group, exc)
        self._acks_waiting.set()

    async def _ack_loop(self) -> None:
        """Send settlements without waiting for the next fetch to carry them (a fetch may
        wait up to fetch.max.wait.ms), a few ms' worth at a time."""
        while True:
            await self._acks_waiting.wait()
            self._acks_waiting = trio.Event()
            try:
                await self._source.commit()
            except (KafkaError, trio.TooSlowError) as exc:
                log.warning("share group %r: acknowledging failed: %s", self.group, exc)
            await trio.sleep(ACK_FLUSH_S)

    async def _finish(self) -> None:
        # Closing the share consumer releases what it holds at once: the held retries are
        # copied to the retry topic first, to keep their due times.
        held = self.core.take_held()
        if held:
            await self._write(held)
        self._after_dispatch()
        await self._commit()
        # Closing the share consumer sends what is pending and releases what it holds.


async def upstream_share_support(bootstrap: str) -> tuple[bool, bool]:
    """(share groups, their dead-letter topics): whether the cluster speaks KIP-932
    (ShareGroupHeartbeat in its ApiVersions) and KIP-1191 (``share.version`` finalized at
    2 or more in its ApiVersions' features, KIP-584)."""
    async with Admin(bootstrap) as admin:
        conn = await admin.cluster.any_connection()
        shares = ApiKey.SHARE_GROUP_HEARTBEAT in conn.broker_versions
        level = conn.finalized_features.get(share_dlq.SHARE_VERSION, 0)
        return shares, shares and level >= share_dlq.SHARE_VERSION_DLQ


class ConsumeService:
    """Every member of this sidecar, and which member each app subscription belongs to."""

    def __init__(self, sidecar: Any) -> None:
        self.sidecar = sidecar
        self.members: dict[tuple[str, str], Member] = {}
        self._subs: dict[Hashable, Member] = {}  # (connection, subscription id) -> member
        self._nursery: trio.Nursery | None = None

    def bind(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    async def subscribe(self, conn: Any, sub_id: int, stream: str, group: str,
                        tags: tuple[str, ...] | None, window: int) -> None:
        session = conn.session
        key = (conn, sub_id)
        try:
            if key in self._subs:
                raise SubscribeError(ErrorCode.INVALID_SUBSCRIPTION,
                                     f"subscription id {sub_id} is in use on this connection")
            member = await self._member(stream, group, tags)
        except SubscribeError as exc:
            session.send_frame(wire.subscribed(sub_id, exc.code, str(exc)))
            return
        self._subs[key] = member
        member.add_subscriber(key, session, sub_id, window)
        session.send_frame(wire.subscribed(sub_id, topic=member.topic, ordering=member.ordering))

    async def _member(self, stream: str, group: str, tags: tuple[str, ...] | None) -> Member:
        config = self.sidecar.config
        for other_stream, other_group in self.members:
            if other_group == group and other_stream != stream:
                raise SubscribeError(
                    ErrorCode.INVALID_SUBSCRIPTION,
                    f"group {group!r} already consumes stream {other_stream!r} on this host; "
                    "a group consumes one stream (use another group name)",
                )
        member = self.members.get((stream, group))
        if member is not None and member.stopping:
            # The last app just left: let it commit and leave the group first, so that
            # the new member starts where the old one's acks got to.
            await member.done.wait()
            member = self.members.get((stream, group))
        if member is None:
            if self._nursery is None or self.sidecar.stopping:
                raise SubscribeError(ErrorCode.SHUTTING_DOWN, "the sidecar is stopping")
            try:
                if stream not in config.streams and config.default_route is None:
                    raise SubscribeError(
                        ErrorCode.UNKNOWN_STREAM,
                        f"unknown stream {stream!r} (not in sidecar.yaml's streams and no "
                        "default_route)",
                    )
                topic = config.route_topic(stream)
                bootstrap = self.sidecar.bootstrap_map(config)[config.stream_cluster(stream)]
                settings, kafka = config.stream_consumer_settings(stream)
            except ConfigError as exc:
                raise SubscribeError(ErrorCode.UNKNOWN_STREAM, str(exc)) from None
            ordering = config.stream_ordering(stream)
            kind: type[Member] = Member
            broker_dlq = False
            if ordering == "none":
                try:
                    shares, broker_dlq = await upstream_share_support(bootstrap)
                except KafkaError as exc:
                    raise SubscribeError(exc.code, f"cluster unreachable: {exc}") from None
                if shares:
                    kind = ShareMember
            member = kind(self, stream, group, topic, bootstrap, settings, kafka, ordering,
                          tags, broker_dlq=broker_dlq)
            stream_config = config.streams.get(stream)
            if stream_config is not None and stream_config.schema_ is not None:
                member.typed = TypedReader(stream, stream_config.schema_,
                                           broker_registry_url(config))
            self.members[(stream, group)] = member
            try:
                await self._nursery.start(member.run)
            except Exception as exc:
                raise SubscribeError(
                    getattr(exc, "code", None) or ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"cannot consume stream {stream!r} as group {group!r}: {exc}",
                ) from None
        else:
            await member.ready.wait()
            if member.failed is not None:
                raise SubscribeError(ErrorCode.UNKNOWN_SERVER_ERROR, member.failed)
        if member.tags != tags:
            raise SubscribeError(
                ErrorCode.INVALID_SUBSCRIPTION,
                f"group {group!r} consumes stream {stream!r} with tags "
                f"{list(member.tags) if member.tags else '*'} on this host; its members "
                "must subscribe alike",
            )
        return member

    def member_done(self, member: Member) -> None:
        if self.members.get((member.stream, member.group)) is member:
            del self.members[(member.stream, member.group)]

    def forget(self, key: Hashable) -> None:
        self._subs.pop(key, None)

    def _lookup(self, conn: Any, sub_id: int) -> Member | None:
        return self._subs.get((conn, sub_id))

    def fetch(self, conn: Any, sub_id: int, max_messages: int, max_wait_ms: int,
              min_bytes: int) -> None:
        member = self._lookup(conn, sub_id)
        if member is None:
            conn.session.send_frame(wire.unsubscribed(
                sub_id, ErrorCode.UNKNOWN_SUBSCRIPTION, f"no subscription {sub_id}"))
            return
        member.core.fetch((conn, sub_id), max_messages, min_bytes, max_wait_ms,
                          trio.current_time())
        member.kick()

    def ack(self, conn: Any, sub_id: int, ids: list[int],
            ranges: list[tuple[int, int]] | None = None) -> None:
        member = self._lookup(conn, sub_id)
        if member is not None and member.core.ack((conn, sub_id), ids, ranges):
            member.kick()  # room in the window, maybe a waiting poll to answer

    def nack(self, conn: Any, sub_id: int, items: list) -> None:
        member = self._lookup(conn, sub_id)
        if member is not None:
            member.write_copies(member.core.nack((conn, sub_id), items, int(time.time() * 1000)))
            member.kick()

    def unsubscribe(self, conn: Any, sub_id: int) -> None:
        member = self._subs.pop((conn, sub_id), None)
        if member is not None:
            member.remove_subscriber((conn, sub_id))
        conn.session.send_frame(wire.unsubscribed(sub_id))

    def connection_closed(self, conn: Any) -> None:
        """The app is gone: what it held goes to the other subscribers."""
        for key in [k for k in self._subs if k[0] is conn]:
            self._subs.pop(key).remove_subscriber(key)

    async def aclose(self, timeout: float) -> None:
        """Stop every member: commit what is done, leave the groups."""
        members = list(self.members.values())
        for member in members:
            member.stop()
        with trio.move_on_after(timeout):
            for member in members:
                await member.done.wait()


class ConsumeCollector:
    """/metrics for subscriptions: one series per (stream, group) member of this sidecar."""

    GAUGES = (
        ("databus_sidecar_consume_subscribers", "apps subscribed", lambda m: len(m.subs)),
        ("databus_sidecar_consume_pending", "messages read and waiting for an app",
         lambda m: m.core.pending),
        ("databus_sidecar_consume_pending_bytes", "key + value bytes of the pending messages",
         lambda m: m.core.pending_bytes),
        ("databus_sidecar_consume_in_flight", "messages handed to apps, not acked or nacked",
         lambda m: m.core.in_flight),
        ("databus_sidecar_consume_held",
         "queue mode on a share group: nacked records kept acquired until their retry is due",
         lambda m: len(m.core.held)),
    )
    COUNTERS = (
        ("databus_sidecar_consume_delivered", "messages handed to apps (redeliveries too)",
         lambda m: m.core.delivered),
        ("databus_sidecar_consume_acked", "messages acked", lambda m: m.core.acked),
        ("databus_sidecar_consume_nacked", "nacks and ack timeouts", lambda m: m.core.nacked),
        ("databus_sidecar_consume_filtered", "messages skipped by the tag filter",
         lambda m: m.core.filtered),
        ("databus_sidecar_consume_dead_lettered",
         "messages dead-lettered: written to the group's DLQ, or REJECTed for the broker "
         "to write there (KIP-1191)", lambda m: m.dead_lettered + m.core.rejected),
    )

    def __init__(self, service: ConsumeService) -> None:
        self.service = service

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        members = list(self.service.members.values())
        for name, doc, get in self.GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["stream", "group"])
            for m in members:
                family.add_metric([m.stream, m.group], get(m))
            yield family
        for name, doc, get in self.COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["stream", "group"])
            for m in members:
                family.add_metric([m.stream, m.group], get(m))
            yield family
