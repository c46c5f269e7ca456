"""The trio-native share consumer (KIP-932, "Queues for Kafka"): a member of a share group.

::

    async with ShareConsumer("localhost:9092", {"group.id": "workers",
                                                "share.acknowledgement.mode": "explicit"}) as sc:
        sc.subscribe(["jobs"])
        while True:
            for record in await sc.poll(1.0):          # record.delivery_count: 1, 2, ...
                sc.acknowledge(record, AcknowledgeType.ACCEPT)   # or RELEASE / REJECT
            await sc.commit()                          # optional: the next poll carries them too

Members of a share group read the same partitions together; each record is *acquired* by one
member under a lock (the group's ``share.record.lock.duration.ms``) and then accepted,
released (delivered again, to any member, its delivery count raised) or rejected (never
delivered again).  The shape follows our ``Consumer`` and confluent-kafka's
``ShareConsumer`` / Java's ``KafkaShareConsumer``:

- ``share.acknowledgement.mode`` ``implicit`` (Kafka's default): the records of a poll are
  accepted by the next poll or commit (or close); ``acknowledge`` is refused.  ``explicit``:
  the application settles each record with ``acknowledge(record, type)`` (default ACCEPT);
  a record left unsettled stays acquired until its lock expires, then another member gets it.
- Acknowledgements ride on the next ShareFetch to the broker that acquired the records (as
  Kafka's clients do); ``commit()`` sends those still pending at once (ShareAcknowledge),
  waits for every acknowledgement sent so far and returns the per-partition outcome of all
  answered since the previous commit.
  ``acknowledgement_commit_callback(offsets, error)`` hears about each one, piggy-backed or
  not (Java's AcknowledgementCommitCallback).
- Membership by ShareGroupHeartbeat (member id chosen here, member epochs, the broker's
  heartbeat interval); the broker assigns partitions, possibly the same to several members.
- One ShareFetch per broker in flight, written by poll() as it hands out the records of
  the previous one, so the next batch is usually waiting when poll() is called again; its
  ``max_records`` is ``max.poll.records``.  A fetch waits for records (``fetch.max.wait.ms``)
  only while the consumer holds no unsettled record from that broker: the broker answers a
  connection's requests one at a time, so acknowledgements made during a long poll would
  wait behind it, and the held records may be what fills the partition's lock window
  (``group.share.partition.max.record.locks``), which would stall that poll to its end.
  A non-waiting fetch that finds nothing is repeated once a record is settled or poll()
  is called.  Buffered records whose lock expired before poll() reached them are dropped
  (the broker has handed them to someone else).
- Close: acknowledgements pending (implicit mode: the last poll's records accepted) go out
  with the share session's final epoch, which makes the broker release whatever else the
  member still holds; then the member leaves the group (heartbeat with epoch -1).

The sans-I/O parts (sessions, acquired ranges, acknowledgement batches) are in share.py.
Timeouts of poll/commit are in seconds (trio's convention).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.entities import build_request, ms
from ..protocol.errors import ErrorCode
from ..protocol.records import CorruptRecordError
from ..protocol.types import TopicPartition
from . import errors
from .backoff import ExponentialBackoff
from .cluster import BackgroundRefresh, Cluster
from .config import ShareConsumerConfig
from .connection import OpenStream
from .fetcher import ConsumerRecord
from .group import _COORDINATOR_ERRORS, CoordinatorClient
from .lifecycle import ClientLifecycle
from .share import (
    FINAL_EPOCH,
    AcknowledgeType,
    PartitionAcks,
    PartitionId,
    ShareSession,
    acquired_records,
)

log = logging.getLogger(__name__)

__all__ = ["AcknowledgeType", "ShareConsumer"]

# A share session the broker no longer has (or has at another epoch): open a new one.
_SESSION_ERRORS = {ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch}
# Membership the coordinator no longer accepts: join again with epoch 0.
_REJOIN_ERRORS = {ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch}
# Partition errors after which the leader may have moved.
_LEADER_ERRORS = {
    ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
}

_ACK_TYPES = {int(kind): kind for kind in AcknowledgeType}

def _has_renew(wire: dict) -> bool:
    """Whether acknowledgement batches (per partition) carry a RENEW: ShareAcknowledge v2's
    ``is_renew_ack``."""
    return any(AcknowledgeType.RENEW in b["acknowledge_types"]
               for batches in wire.values() for b in batches)


AckResults = dict[TopicPartition, "errors.KafkaError | None"]
CommitCallback = Callable[[dict[TopicPartition, set[int]], "errors.KafkaError | None"], Any]


class ShareMember(CoordinatorClient):
    """Share-group membership: ShareGroupHeartbeat every ``heartbeat_interval`` the
    coordinator names, the subscription sent when it changes, the assignment taken as the
    coordinator gives it (a set of (topic id, partition))."""

    def __init__(self, cluster: Cluster, config: ShareConsumerConfig,
                 on_assignment: Callable[[], Any]) -> None:
        self.cluster = cluster
        self.config = config
        self.group_id = config.group_id
        self.coordinator: int | None = None
        self.member_id = str(uuid.uuid4())  # KIP-932: the member names itself, for life
        self.member_epoch = 0
        self.topics: tuple[str, ...] = ()
        self._sent_topics: tuple[str, ...] | None = None
        self.assignment: set[PartitionId] = set()
        self.interval_ms = 5000  # until the coordinator says
        self.fatal: errors.KafkaError | None = None  # raised to the next poll
        self._on_assignment = on_assignment
        self._wakeup = trio.Event()

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = tuple(sorted(set(topics)))
        self._wakeup.set()

    async def heartbeat_loop(self) -> None:
        backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
        failures = 0
        while True:
            wait = self.interval_ms / 1000
            if not self.topics and self.member_epoch > 0:
                await self.leave()  # unsubscribed: Kafka's consumers leave the group
            elif self.topics and self.fatal is None:
                try:
                    again = await self._heartbeat()
                    failures = 0
                    if again:
                        continue
                except errors.KafkaError as exc:
                    log.debug("share group %s: heartbeat failed: %s", self.group_id, exc)
                    wait = backoff.backoff_ms(failures) / 1000
                    failures += 1
            with trio.move_on_after(wait):
                await self._wakeup.wait()
            self._wakeup = trio.Event()

    async def _heartbeat(self) -> bool:
        """One heartbeat; True when another should follow at once (rejoin)."""
        topics = self.topics if self.member_epoch == 0 or self.topics != self._sent_topics else None
        response = await self.request(ApiKey.SHARE_GROUP_HEARTBEAT, {
            "group_id": self.group_id, "member_id": self.member_id,
            "member_epoch": self.member_epoch, "rack_id": self.config.client_rack or None,
            "subscribed_topic_names": list(topics) if topics is not None else None,
        })
        code = ErrorCode(response.error_code)
        if code == ErrorCode.none:
            if topics is not None:
                self._sent_topics = topics
            self.member_epoch = int(response.member_epoch)
            self.interval_ms = max(int(ms(response.heartbeat_interval)), 1)
            if response.assignment is not None:
                self.assignment = {(tp.topic_id, int(p))
                                   for tp in response.assignment.topic_partitions
                                   for p in tp.partitions}
                await self._learn_topic_ids()
                self._on_assignment()
            return False
        if code in _REJOIN_ERRORS:
            log.info("share group %s: %s; joining again", self.group_id, code.name)
            self.rejoin()
            self.assignment = set()
            self._on_assignment()
            return True
        error = errors.from_code(code, f"ShareGroupHeartbeat {self.group_id!r}: "
                                       f"{response.error_message or ''}".rstrip(": "))
        if isinstance(error, _COORDINATOR_ERRORS) or code == ErrorCode.coordinator_load_in_progress:
            self.coordinator_dead(error)
            raise error
        if error.retriable:
            raise error
        self.fatal = error  # e.g. GROUP_ID_NOT_FOUND: the id names a classic group
        return False

    def rejoin(self) -> None:
        """A broker no longer knows this member (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH on a
        share request): join again with epoch 0."""
        self.member_epoch, self._sent_topics = 0, None
        self._wakeup.set()

    async def _learn_topic_ids(self) -> None:
        known = {meta.topic_id for meta in self.cluster.topics.values()}
        if any(topic_id not in known for topic_id, _ in self.assignment):
            await self.cluster.refresh_metadata(self.topics, allow_auto_create=False)

    async def leave(self) -> None:
        if self.member_epoch <= 0:
            return
        try:
            await self.request(ApiKey.SHARE_GROUP_HEARTBEAT, {
                "group_id": self.group_id, "member_id": self.member_id, "member_epoch": -1,
                "subscribed_topic_names": None,
            }, timeout=5)
        except errors.KafkaError as exc:
            log.debug("share group %s: leaving failed: %s", self.group_id, exc)
        self.member_epoch = 0
        self.assignment = set()


@dataclass(eq=False)
class _AckFlight:
    """Acknowledgements on their way to a broker: who waits for their outcome."""

    offsets: dict[TopicPartition, list[int]]
    done: trio.Event = field(default_factory=trio.Event)
    results: AckResults = field(default_factory=dict)


@dataclass(eq=False)
class _Chunk:
    """Records of one partition from one ShareFetch, not yet handed out by poll()."""

    node: int
    tp: TopicPartition
    records: list[ConsumerRecord]
    expires: float  # trio time their acquisition lock runs out
    index: int = 0


class ShareConsumer(ClientLifecycle):
    """Trio-native share consumer; use as ``async with ShareConsumer(bootstrap, config)``.

    ``open_stream(host, port)`` replaces the TCP connect (see connection.OpenStream)."""

    _what = "share consumer"

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        config: Mapping[str, Any] | ShareConsumerConfig | None = None,
        *,
        open_stream: OpenStream | None = None,
        acknowledgement_commit_callback: CommitCallback | None = None,
    ) -> None:
        self.config = (config if isinstance(config, ShareConsumerConfig)
                       else ShareConsumerConfig.from_kafka(config or {}))
        self._explicit = self.config.share_acknowledgement_mode == "explicit"
        self._cluster = Cluster(bootstrap_servers, self.config, allow_auto_create=False,
                                open_stream=open_stream)
        self._member = ShareMember(self._cluster, self.config, self._wake_fetcher)
        self._cluster.auth_listeners.append(self._notify)  # pollers raise a refused login
        self._callback = acknowledgement_commit_callback
        self._sessions: dict[int, ShareSession] = {}
        self._locks: dict[int, trio.Lock] = {}  # per broker: epoch order == write order
        self._in_flight: set[int] = set()  # brokers with a ShareFetch out
        # brokers whose last (non-waiting) fetch found nothing: not asked again until a
        # record is settled or poll() is called
        self._quiet: set[int] = set()
        self._buffer: deque[_Chunk] = deque()
        self._buffered: dict[int, int] = {}  # broker -> chunks in the buffer
        self._acks: dict[TopicPartition, PartitionAcks] = {}
        self._flights: set[_AckFlight] = set()
        self._settled: AckResults = {}  # outcomes since the last commit()
        self._lock_timeout_ms: int | None = None
        self._errors: list[errors.KafkaError] = []
        self._wakeup = trio.Event()
        self._data_ready = trio.Event()
        self._metadata = BackgroundRefresh(self._cluster, self.config.retry_backoff_ms / 1000,
                                           self._wake_fetcher, lambda: self._member.topics)
        self._fetch_nursery: trio.Nursery | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def _start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self._fetch_loop)
        nursery.start_soon(self._member.heartbeat_loop)

    async def _settle(self) -> None:
        """close()'s graceful part: settle what is pending (implicit mode: accept the last
        poll's records), close the share sessions (the broker releases every record still
        held), leave the group."""
        if not self._explicit:
            self._accept_delivered()
        for node, session in list(self._sessions.items()):
            if session.is_open:
                try:
                    await self._acknowledge(node, final=True)
                except errors.KafkaError as exc:
                    log.warning("closing the share session on broker %s: %s", node, exc)
        await self._member.leave()

    # -- subscription --------------------------------------------------------------------

    def subscribe(self, topics: str | Iterable[str]) -> None:
        """Join ``group.id`` consuming ``topics`` (the broker assigns the partitions)."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            return self.unsubscribe()
        self._cluster.wanted_topics.update(topics)
        self._member.subscribe(topics)

    def unsubscribe(self) -> None:
        """Stop consuming and leave the group (records still held go back when the share
        session forgets their partitions or at close)."""
        self._member.subscribe(())
        self._member.assignment = set()
        self._wake_fetcher()

    def subscription(self) -> tuple[str, ...]:
        return self._member.topics

    def assignment(self) -> set[TopicPartition]:
        names = self._topic_names()
        return {(names[t], p) for t, p in self._member.assignment if t in names}

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """How long the records of the last ShareFetch stay acquired (the group's
        ``share.record.lock.duration.ms``, as the broker said), None before any answer
        (Java's ``KafkaShareConsumer.acquisitionLockTimeoutMs()``)."""
        return self._lock_timeout_ms

    # -- consuming -----------------------------------------------------------------------

    async def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Records acquired for this member within ``timeout`` seconds (at most
        ``max.poll.records``), each with its ``delivery_count``; [] when none arrived.
        Implicit mode: first accepts the records of the previous poll."""
        self._check_open()
        if not self._explicit:
            self._accept_delivered()
        self._quiet.clear()
        self._wake_fetcher()  # pending acknowledgements may ride on a fetch now
        out: list[ConsumerRecord] = []
        with trio.move_on_after(max(timeout, 0)):
            while True:
                self._raise_errors()
                out = self._drain(self.config.max_poll_records)
                if out:
                    break
                await self._data_ready.wait()
        if not out:
            self._raise_errors()
            return []
        # the next fetch goes out now, carrying the acknowledgements made so far, and its
        # answer comes while the application works on these records.  Shielded: the
        # records are handed out already (a write on an open connection is quick)
        with trio.CancelScope(shield=True):
            await self._start_fetches(connected_only=True)
        return out

    def acknowledge(self, record: ConsumerRecord,
                    type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        """Settle one record poll() returned (explicit mode): ACCEPT, RELEASE or REJECT.
        Sent with the next fetch, commit or close.  RENEW (KIP-1222, a broker serving
        ShareFetch v2) keeps the record: its lock starts again and it is acknowledged later
        (a broker without v2 answers INVALID_REQUEST in commit's results)."""
        if not self._explicit:
            raise errors.IllegalStateError(
                "acknowledge() needs share.acknowledgement.mode=explicit (in implicit mode "
                "the next poll or commit accepts the records)")
        kind = _ACK_TYPES.get(type)  # a dict hit: this runs once per record
        if kind is None:
            raise ValueError(f"acknowledge type {type!r} is not ACCEPT (1), RELEASE (2), "
                             "REJECT (3) or RENEW (4)")
        state = self._acks.get((record.topic, record.partition))
        settled = state.acknowledge(record.offset, kind) if state is not None else False
        if settled and state.node in self._quiet:
            self._quiet.discard(state.node)
            self._wake_fetcher()
        if settled is False:
            raise errors.IllegalStateError(
                f"record {record.topic}-{record.partition}@{record.offset} was not handed out "
                "by this share consumer's poll, or is acknowledged already")

    async def commit(self, timeout: float | None = None) -> AckResults:
        """Send the pending acknowledgements now (ShareAcknowledge) and wait until every
        acknowledgement sent so far is answered.  Returns the outcome of every
        acknowledgement answered since the previous commit (sent by this call or carried
        by a fetch): {partition: None, or the first Kafka error}.  Raises when a broker
        could not be asked (connection, session lost) or on ``timeout`` (seconds)."""
        self._check_open()
        if not self._explicit:
            self._accept_delivered()
        limit = timeout if timeout is not None else self.config.request_timeout_ms / 1000
        with trio.fail_after(limit):
            nodes = {state.node for state in self._acks.values() if state.pending}
            for node in sorted(nodes):
                await self._acknowledge(node)
            # Every acknowledgement made before this call is in a flight now: this call's
            # ShareAcknowledge, or a ShareFetch that took it while _acknowledge waited for
            # the broker's lock (so the flights are gathered after sending, not before).
            for flight in list(self._flights):
                await flight.done.wait()
        results, self._settled = self._settled, {}
        return results

    def commit_async(self, callback: Callable[[AckResults | None, BaseException | None], Any]
                     | None = None) -> None:
        """commit() in the background; ``callback(results, error)`` when it is done."""
        self._check_open()

        async def run() -> None:
            results, error = None, None
            try:
                results = await self.commit()
            except (errors.KafkaError, trio.TooSlowError) as exc:
                error = exc
                log.warning("async share commit failed: %s", exc)
            if callback is not None:
                try:
                    callback(results, error)
                except Exception:
                    log.exception("commit callback %r raised", callback)

        self._nursery.start_soon(run)

    # -- buffer --------------------------------------------------------------------------

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        now = trio.current_time()
        while self._buffer and len(out) < limit:
            chunk = self._buffer[0]
            if chunk.expires > now:
                taken = chunk.records[chunk.index:chunk.index + limit - len(out)]
                chunk.index += len(taken)
                state = self._acks.get(chunk.tp)
                if state is not None and state.node == chunk.node:
                    state.hand_out(taken)
                    out += taken
            else:
                log.debug("%s-%s: %d buffered records dropped, their lock expired",
                          chunk.tp[0], chunk.tp[1], len(chunk.records) - chunk.index)
                chunk.index = len(chunk.records)
            if chunk.index >= len(chunk.records):
                self._buffer.popleft()
                self._buffered[chunk.node] -= 1
                if not self._buffered[chunk.node]:
                    self._wake_fetcher()  # prefetch the next batch from that broker
        return out

    def _accept_delivered(self) -> None:
        for state in self._acks.values():
            state.accept_delivered()

    def _raise_errors(self) -> None:
        if self._member.fatal is not None:
            raise self._member.fatal
        # a refused login, at once (its heartbeats and fetches go on reconnecting)
        auth = self._cluster.authentication_error()
        if auth is not None:
            raise auth
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error

    # -- fetching ------------------------------------------------------------------------

    def _wake_fetcher(self) -> None:
        self._wakeup.set()

    def _notify(self) -> None:
        self._data_ready.set()
        self._data_ready = trio.Event()

    def _topic_names(self) -> dict[Any, str]:
        return {meta.topic_id: name for name, meta in self._cluster.topics.items()
                if meta.topic_id is not None}

    def _wanted_by_node(self) -> dict[int, set[PartitionId]]:
        names = self._topic_names()
        wanted: dict[int, set[PartitionId]] = {}
        unknown = False
        for topic_id, partition in self._member.assignment:
            name = names.get(topic_id)
            leader = self._cluster.leader_for(name, partition) if name is not None else -1
            if leader < 0:
                unknown = True
                continue
            wanted.setdefault(leader, set()).add((topic_id, partition))
        if unknown:
            self._refresh_metadata()
        return wanted

    async def _fetch_loop(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._fetch_nursery = nursery
            task_status.started()
            while True:
                await self._start_fetches()
                with trio.move_on_after(self.config.retry_backoff_ms / 1000 * 5):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()

    async def _start_fetches(self, *, connected_only: bool = False) -> None:
        """Send a ShareFetch to every broker that has partitions for us, none in flight and
        no records waiting in the buffer; their answers are awaited in the background.
        poll() calls this too, right after handing records out, so the next fetch is on
        the wire while the application works on them (prefetch); it asks only brokers it
        is connected to (``connected_only``: no connect delays a poll)."""
        if self._closed:
            return
        wanted = self._wanted_by_node()
        # brokers whose session still names partitions no longer assigned: tell them
        stale = {node for node, s in self._sessions.items() if s.is_open and s.known}
        connected = set(self._cluster.connected_nodes()) if connected_only else None
        for node in set(wanted) | stale:
            if node in self._in_flight or self._buffered.get(node):
                continue
            if connected is not None and node not in connected:
                continue
            if node in self._quiet:
                holding, pending = self._held(node)
                if holding and not pending:
                    continue
                self._quiet.discard(node)
            self._in_flight.add(node)
            try:
                sent = await self._send_fetch(node, wanted.get(node, set()))
            except errors.KafkaError as exc:
                self._fetch_nursery.start_soon(self._fetch_failed, node, exc)
                continue
            if sent is None:
                self._in_flight.discard(node)
            else:
                self._fetch_nursery.start_soon(self._receive_fetch, node, *sent)

    async def _fetch_failed(self, node: int, exc: errors.KafkaError) -> None:
        """Back off (the broker stays marked in flight meanwhile) and look for leaders."""
        try:
            log.debug("ShareFetch from broker %s failed: %s", node, exc)
            self._refresh_metadata()
            await trio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._in_flight.discard(node)
            self._wake_fetcher()

    def _refresh_metadata(self) -> None:
        if self._nursery is not None:
            self._metadata.start(self._nursery)

    def _held(self, node: int) -> tuple[bool, bool]:
        """(records handed out and not settled, acknowledgements not sent) for ``node``."""
        holding = pending = False
        for state in self._acks.values():
            if state.node == node:
                holding = holding or bool(state.delivered)
                pending = pending or bool(state.pending)
        return holding, pending

    def _take_acks(self, node: int, only: set[PartitionId] | None = None,
                   ) -> tuple[dict[PartitionId, list[dict]], _AckFlight | None]:
        """The pending acknowledgements for ``node`` (of partitions in ``only``) as wire
        batches, and the flight that will carry their outcome."""
        wire: dict[PartitionId, list[dict]] = {}
        offsets: dict[TopicPartition, list[int]] = {}
        for tp, state in self._acks.items():
            if state.node != node or not state.pending:
                continue
            key = (state.topic_id, tp[1])
            if only is not None and key not in only:
                continue
            wire[key], offsets[tp] = state.take_batches()
        if not wire:
            return wire, None
        flight = _AckFlight(offsets)
        self._flights.add(flight)
        return wire, flight

    def _finish(self, flight: _AckFlight | None, results: AckResults | None = None,
                error: errors.KafkaError | None = None) -> None:
        """Acknowledgements answered (``results`` per partition) or lost (``error``)."""
        if flight is None:
            return
        for tp in flight.offsets:
            outcome = flight.results[tp] = error if results is None else results.get(tp)
            if self._settled.get(tp) is None:
                self._settled[tp] = outcome  # for the next commit(); an error stays
        self._flights.discard(flight)
        flight.done.set()
        if self._callback is not None:
            for tp, offsets in flight.offsets.items():
                try:
                    self._callback({tp: set(offsets)}, flight.results[tp])
                except Exception:
                    log.exception("acknowledgement commit callback %r raised", self._callback)

    def _session_lost(self, node: int) -> None:
        """The broker released what this member held there: forget it here too."""
        self._sessions.setdefault(node, ShareSession()).reset()
        for state in self._acks.values():
            if state.node == node:
                state.forget()
        kept = deque(c for c in self._buffer if c.node != node)
        if len(kept) != len(self._buffer):
            self._buffer = kept
            self._buffered[node] = 0

    @staticmethod
    def _topics_field(keys: Iterable[PartitionId], wire: dict[PartitionId, list[dict]]):
        topics: dict[Any, list[dict]] = {}
        for topic_id, partition in sorted(set(keys) | set(wire), key=str):
            topics.setdefault(topic_id, []).append({
                "partition_index": partition,
                "acknowledgement_batches": wire.get((topic_id, partition), [])})
        return [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]

    async def _send_fetch(self, node: int, wanted: set[PartitionId]):
        """Write a ShareFetch for ``wanted`` (with the acknowledgements pending for those
        partitions) to ``node``: (connection, pending answer, acknowledgement flight), or
        None when there is nothing to ask."""
        cfg = self.config
        session = self._sessions.setdefault(node, ShareSession())
        flight = None
        async with self._locks.setdefault(node, trio.Lock()):
            if self._closed or (wanted and self._member.member_epoch <= 0):
                return None
            conn = await self._cluster.connection(node)
            added, forgotten = session.plan(wanted)
            if session.is_open:
                # only partitions staying in the session: acknowledgements of the others
                # go by ShareAcknowledge (commit, close)
                wire, flight = self._take_acks(node, wanted)
            else:
                wire = {}  # a ShareFetch opening a session carries none (nothing is valid)
            # long-poll only when holding nothing from this broker: acknowledgements made
            # while a fetch waits would wait behind it (one request at a time per
            # connection), and the records held could be what fills the partition's lock
            # window, which would stall the fetch until fetch.max.wait.ms
            max_wait = 0 if self._held(node)[0] else cfg.fetch_max_wait_ms
            forgotten_field: dict[Any, list[int]] = {}
            for topic_id, partition in forgotten:
                forgotten_field.setdefault(topic_id, []).append(partition)
            body = build_request(ApiKey.SHARE_FETCH, conn.version(ApiKey.SHARE_FETCH), {
                "group_id": cfg.group_id, "member_id": self._member.member_id,
                "share_session_epoch": session.epoch,
                "max_wait": max_wait, "min_bytes": cfg.fetch_min_bytes,
                "max_bytes": cfg.fetch_max_bytes, "max_records": cfg.max_poll_records,
                "batch_size": cfg.max_poll_records,
                "share_acquire_mode": 1 if cfg.share_acquire_mode == "record_limit" else 0,
                "is_renew_ack": False,
                "topics": self._topics_field(added, wire),
                "forgotten_topics_data": [{"topic_id": t, "partitions": ps}
                                          for t, ps in forgotten_field.items()],
            })
            try:
                pending = await conn.write(body)
            except errors.KafkaError as exc:
                self._finish(flight, error=exc)
                self._session_lost(node)
                raise
            session.sent(wanted)
        return conn, pending, flight, max_wait == 0

    async def _receive_fetch(self, node: int, conn, pending, flight: _AckFlight | None,
                             short: bool) -> None:
        cfg = self.config
        try:
            response = await conn.wait(pending, (cfg.request_timeout_ms + cfg.fetch_max_wait_ms)
                                       / 1000)
        except errors.KafkaError as exc:
            self._finish(flight, error=exc)
            self._session_lost(node)  # whether the broker handled it is unknowable
            await self._fetch_failed(node, exc)
            return
        try:
            got = self._handle_fetch(node, response, flight)
            if short and not got:
                # nothing there now: ask again once the application settles a record or
                # polls, not in a loop
                self._quiet.add(node)
        finally:
            self._in_flight.discard(node)
            self._wake_fetcher()

    def _handle_fetch(self, node: int, response: Any, flight: _AckFlight | None) -> bool:
        """Apply a ShareFetch answer; whether it brought records."""
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            error = errors.from_code(code, f"ShareFetch from broker {node}: "
                                           f"{response.error_message or ''}".rstrip(": "))
            self._finish(flight, error=error)
            self._top_level_error(node, code, error)
            return False
        lock_ms = ms(response.acquisition_lock_timeout)
        if lock_ms > 0:
            self._lock_timeout_ms = lock_ms
        lock_s = lock_ms / 1000
        expires = trio.current_time() + (lock_s if lock_s > 0 else 30.0)
        names = self._topic_names()
        results: AckResults = {}
        got = False
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                self._refresh_metadata()
                continue
            for p in topic.partitions:
                tp = (name, int(p.partition_index))
                ack_code = int(p.acknowledge_error_code)
                results[tp] = errors.from_code(ack_code, f"acknowledging {tp[0]}-{tp[1]}") \
                    if ack_code else None
                pcode = int(p.error_code)
                if pcode:
                    if pcode in _LEADER_ERRORS or errors.for_code(pcode).retriable:
                        self._refresh_metadata()
                    else:
                        self._errors.append(errors.from_code(pcode, f"ShareFetch {tp[0]}-{tp[1]}"))
                    continue
                if not p.acquired_records:
                    continue
                ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                          for a in p.acquired_records]
                try:
                    records, gaps = acquired_records(name, tp[1], bytes(p.records or b""), ranges,
                                                     check_crcs=self.config.check_crcs)
                except CorruptRecordError as exc:
                    # the records stay acquired until their lock expires: delivered again
                    self._errors.append(errors.CorruptMessageError(f"{tp[0]}-{tp[1]}: {exc}"))
                    continue
                state = self._acks.get(tp)
                if state is None or state.node != node or state.topic_id != topic.topic_id:
                    state = self._acks[tp] = PartitionAcks(topic.topic_id, node)
                state.add_gaps(gaps)
                if records:
                    self._buffer.append(_Chunk(node, tp, records, expires))
                    self._buffered[node] = self._buffered.get(node, 0) + 1
                    got = True
        self._finish(flight, results)
        if got:
            self._notify()
        return got

    def _top_level_error(self, node: int, code: ErrorCode, error: errors.KafkaError) -> None:
        if code in _SESSION_ERRORS:
            log.info("share session on broker %s: %s; opening a new one", node, code.name)
            self._session_lost(node)
        elif code in _REJOIN_ERRORS:
            self._session_lost(node)
            self._member.rejoin()
        elif not error.retriable:
            self._errors.append(error)

    async def _acknowledge(self, node: int, *, final: bool = False) -> _AckFlight | None:
        """ShareAcknowledge of what is pending for ``node``; ``final`` closes the session
        (the broker then releases every record the member still holds there)."""
        session = self._sessions.setdefault(node, ShareSession())
        async with self._locks.setdefault(node, trio.Lock()):
            if not session.is_open:
                return None
            wire, flight = self._take_acks(node)
            if not wire and not final:
                return None
            conn = await self._cluster.connection(node)
            body = build_request(ApiKey.SHARE_ACKNOWLEDGE, conn.version(ApiKey.SHARE_ACKNOWLEDGE), {
                "group_id": self.config.group_id, "member_id": self._member.member_id,
                "share_session_epoch": FINAL_EPOCH if final else session.epoch,
                "is_renew_ack": _has_renew(wire),
                "topics": self._topics_field((), wire),
            })
            try:
                pending = await conn.write(body)
            except errors.KafkaError as exc:
                self._finish(flight, error=exc)
                self._session_lost(node)
                raise
            if final:
                session.reset()
            else:
                session.sent(session.known)
        try:
            response = await conn.wait(pending)
        except errors.KafkaError as exc:
            self._finish(flight, error=exc)
            self._session_lost(node)
            raise
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            error = errors.from_code(code, f"ShareAcknowledge to broker {node}: "
                                           f"{response.error_message or ''}".rstrip(": "))
            self._finish(flight, error=error)
            self._top_level_error(node, code, error)
            raise error
        names = self._topic_names()
        results: AckResults = {}
        for topic in response.responses:
            name = names.get(topic.topic_id)
            for p in topic.partitions:
                if name is not None:
                    results[(name, int(p.partition_index))] = (
                        errors.from_code(int(p.error_code), f"acknowledging {name}-"
                                         f"{p.partition_index}") if p.error_code else None)
        self._finish(flight, results)
        return flight
