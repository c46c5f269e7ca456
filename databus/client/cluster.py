"""The client's view of a cluster: bootstrap, metadata cache, one connection per broker.

``Cluster`` owns the broker connections (opened lazily, one per node id; after a failed
connect the next attempt to that node waits ``reconnect.backoff.ms``, doubling (jittered)
per consecutive failure up to ``reconnect.backoff.max.ms``, as Kafka's clients do) and the
metadata (brokers, topics, partition leaders).  Producer, consumer and admin each own one
Cluster and run it inside their nursery.

A refused login (or TLS handshake) is an AuthenticationError: ``connection`` and
``any_connection`` raise it as itself, and go on raising it at once while the reconnect
backoff after it lasts (``authentication_error()``); it is logged once per change, and the
next connect after the backoff tries again, so credentials fixed on the broker are picked up.

Metadata refreshes are coalesced: callers that ask for a refresh while one is running wait
for it instead of sending another.  A refresh asks for the union of the topics anyone has
asked about, so the cache stays complete.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from ..protocol.addresses import parse_host_port_list
from ..protocol.api_keys import ApiKey
from . import errors
from .backoff import ExponentialBackoff
from .connection import BrokerConnection, OpenStream
from .security import Security

log = logging.getLogger(__name__)


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or a list of ``"host:port"`` -> [(host, port), ...].

    An empty host (``:9092``) is this host, as in Kafka's clients.
    """
    try:
        addresses = parse_host_port_list(bootstrap, what="bootstrap.servers")
    except ValueError as exc:
        raise errors.ConfigError(str(exc)) from None
    return [(host or "localhost", port) for host, port in addresses]


@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass
class TopicMetadata:
    name: str
    error_code: int
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    is_internal: bool = False
    topic_id: Any = None


@dataclass(frozen=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None



class BackgroundRefresh:
    """A metadata refresh asked for from synchronous code (a fetcher that met a partition
    without a leader, or a failed fetch): it runs in ``nursery`` after ``backoff``
    seconds, at most one at a time, for ``topics()`` (the cluster's known topics when
    that is empty), and calls ``then()`` when it ends.  A failed refresh is logged at
    DEBUG only: ``then()`` wakes the caller, whose next look asks again."""

    def __init__(self, cluster: Cluster, backoff: float, then: Callable[[], None],
                 topics: Callable[[], Iterable[str]] = tuple) -> None:
        self.cluster, self.backoff, self.then, self.topics = cluster, backoff, then, topics
        self.running = False

    def start(self, nursery: trio.Nursery) -> None:
        if not self.running:
            self.running = True
            nursery.start_soon(self._refresh)

    async def _refresh(self) -> None:
        try:
            await trio.sleep(self.backoff)
            await self.cluster.refresh_metadata(self.topics(), allow_auto_create=False)
        except errors.KafkaError as exc:
            log.debug("metadata refresh failed: %s", exc)
        finally:
            self.running = False
            self.then()


class Cluster:
    """Connections and metadata for one cluster.  ``await cluster.start(nursery)`` first.

    ``open_stream(host, port)`` opens every broker connection's byte stream (default: TCP;
    tests pass one that hands out ``trio.testing`` memory streams).
    """

    def __init__(
        self, bootstrap: str | Sequence[str], config: Any, *, allow_auto_create: bool = True,
        open_stream: OpenStream | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        # Whether Metadata requests may create missing topics (brokers with
        # auto.create.topics.enable do): yes for producers, never for the admin client.
        self.allow_auto_create = allow_auto_create
        self.config = config
        self.open_stream = open_stream
        # TLS context and SASL login of every connection, from security.protocol & co.
        self.security = Security.from_config(config)
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        # Sorted partition ids of each usable topic (partitions_for), made once per metadata
        # update: Producer.send reads it for every record.
        self.partition_ids: dict[str, list[int]] = {}
        self.controller_id: int = -1
        self.cluster_id: str | None = None
        self.wanted_topics: set[str] = set()
        self.metadata_version = 0  # bumps on every successful refresh
        self.metadata_updated = trio.Event()
        self._connections: dict[int, BrokerConnection] = {}
        self._connect_locks: dict[int, trio.Lock] = {}
        self._refresh_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._reconnect_backoff = ExponentialBackoff(
            config.reconnect_backoff_ms, config.reconnect_backoff_max_ms
        )
        # node id -> (consecutive failed connects, trio time before which not to try again)
        self._connect_failures: dict[int, tuple[int, float]] = {}
        self._extra_addresses: dict[int, tuple[str, int]] = {}
        # The latest refused login or TLS handshake (errors.AuthenticationError) and the
        # trio time until which it stands (the reconnect backoff that followed it); cleared
        # by a connection that logs in.  See authentication_error().
        self._auth_error: errors.AuthenticationError | None = None
        self._auth_error_until = 0.0
        self._auth_logged: tuple[type, str] | None = None
        # Called (no arguments) when a connection's login is refused: wakes callers that
        # wait for something else (Consumer.poll waits for records).
        self.auth_listeners: list[Any] = []
        self.closed = False
        self.connections_opened = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, nursery: trio.Nursery) -> None:
        """Attach to ``nursery`` (connection reader tasks run there)."""
        self._nursery = nursery

    @contextlib.asynccontextmanager
    async def running(self):
        """The lifecycle every client shares: a nursery the cluster is attached to, yielded
        for the client's own tasks; on exit those are cancelled and every connection is
        closed (shielded, so it happens even when the exit is a cancellation)."""
        try:
            async with trio.open_nursery() as nursery:
                self.start(nursery)
                try:
                    yield nursery
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        self.closed = True
        for conn in list(self._connections.values()):
            await conn.aclose()
        self._connections.clear()

    # -- connections ---------------------------------------------------------------------

    def register_address(self, node_id: int, host: str, port: int) -> None:
        """Name an extra node id (e.g. a group coordinator's dedicated connection)."""
        if self._extra_addresses.get(node_id) != (host, port):
            self._extra_addresses[node_id] = (host, port)
            old = self._connections.pop(node_id, None)
            if old is not None:
                self._nursery.start_soon(old.aclose)

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id in self._extra_addresses:
            return self._extra_addresses[node_id]
        if node_id in self.brokers:
            b = self.brokers[node_id]
            return b.host, b.port
        if node_id < 0 and -node_id - 1 < len(self.bootstrap):
            return self.bootstrap[-node_id - 1]
        raise errors.KafkaConnectionError(f"unknown broker id {node_id}")

    async def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to ``node_id``, connecting (once, even if many ask) if needed."""
        if self.closed:
            raise errors.KafkaConnectionError("client is closed")
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connect_locks.setdefault(node_id, trio.Lock())
        async with lock:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            failures, retry_at = self._connect_failures.get(node_id, (0, 0.0))
            if failures:
                auth = self.authentication_error()
                if auth is not None and trio.current_time() < retry_at:
                    # As Kafka's clients: while the backoff after a refused login lasts,
                    # a caller gets the refusal at once rather than a wait then the same.
                    raise auth
                await trio.sleep_until(retry_at)
            host, port = self._address(node_id)
            conn = BrokerConnection(
                host,
                port,
                node_id=node_id,
                client_id=self.config.client_id,
                request_timeout_ms=self.config.request_timeout_ms,
                connect_timeout_ms=self.config.socket_connection_setup_timeout_ms,
                open_stream=self.open_stream,
                security=self.security,
            )
            try:
                await conn.connect(self._nursery)
            except errors.KafkaError as exc:
                wait = self._reconnect_backoff.backoff_ms(failures) / 1000
                retry_at = trio.current_time() + wait
                self._connect_failures[node_id] = (failures + 1, retry_at)
                if isinstance(exc, errors.AuthenticationError):
                    self._authentication_failed(exc, retry_at)
                raise
            self._connect_failures.pop(node_id, None)
            if self._auth_error is not None:
                self._authenticated(conn)
            self._connections[node_id] = conn
            self.connections_opened += 1
            return conn

    def authentication_error(self) -> errors.AuthenticationError | None:
        """The refused login (or TLS handshake) callers should see now, as Java's clients
        throw AuthenticationException: the latest one while the reconnect backoff after it
        lasts, None after that (the next connect tries again) and once a login succeeds.
        A new instance each time (it is raised in several tasks)."""
        exc = self._auth_error
        if exc is None or trio.current_time() >= self._auth_error_until:
            return None
        return type(exc)(str(exc))

    def _authentication_failed(self, exc: errors.AuthenticationError, until: float) -> None:
        self._auth_error = exc
        self._auth_error_until = max(self._auth_error_until, until)
        # Logged once per change, not per attempt: the client retries every
        # reconnect.backoff.max.ms for as long as the credentials stay wrong.
        key = (type(exc), str(exc).rsplit(">: ", 1)[-1])
        if key != self._auth_logged:
            self._auth_logged = key
            log.error("%s; calls fail with %s until a login succeeds (the client retries "
                      "every reconnect.backoff.max.ms=%d)", exc, type(exc).__name__,
                      self.config.reconnect_backoff_max_ms)
        for listener in list(self.auth_listeners):
            listener()

    def _authenticated(self, conn: BrokerConnection) -> None:
        if self._auth_logged is not None:
            log.info("%s: logged in (after the refusal logged before)", conn)
        self._auth_error, self._auth_error_until, self._auth_logged = None, 0.0, None

    async def disconnect(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (if any): requests still out on it fail, and
        the next request opens a new one."""
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            await conn.aclose()

    def connected_nodes(self) -> list[int]:
        return [n for n, c in self._connections.items() if not c.closed]

    async def any_connection(self) -> BrokerConnection:
        """A connection to some live broker: known brokers first, then bootstrap addresses."""
        candidates = self.connected_nodes()
        if candidates:
            return self._connections[random.choice(candidates)]
        nodes = list(self.brokers) or []
        random.shuffle(nodes)
        nodes += [-(i + 1) for i in range(len(self.bootstrap))]
        failures: list[errors.KafkaError] = []
        for node in nodes:
            try:
                return await self.connection(node)
            except errors.KafkaError as exc:
                failures.append(exc)
        auth = [f for f in failures if isinstance(f, errors.AuthenticationError)]
        if auth:
            # Refused credentials are the caller's to fix, not a reachability problem to
            # retry: raised as themselves (Java's AuthenticationException), at once.
            raise auth[-1]
        raise errors.KafkaConnectionError(
            "no broker reachable: " + "; ".join(map(str, failures[-len(self.bootstrap) - 1 :]))
        ) from (failures[-1] if failures else None)

    async def request(self, node_id: int | None, api_key: int, fields: Mapping[str, Any], **kw):
        """Send a request to ``node_id`` (None: any broker) and return the response."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.request(api_key, fields, **kw)

    # -- metadata ------------------------------------------------------------------------

    async def refresh_metadata(
        self, topics: Iterable[str] = (), *, all_topics: bool = False,
        allow_auto_create: bool | None = None,
    ) -> None:
        """Fetch metadata for ``topics`` plus every topic asked about before."""
        self.wanted_topics.update(topics)
        seen = self.metadata_version
        async with self._refresh_lock:
            if self.metadata_version != seen and not all_topics and not topics:
                return  # someone refreshed while we waited
            names = None if all_topics else sorted(self.wanted_topics)
            response = await self.request(
                None,
                ApiKey.METADATA,
                {
                    "topics": None if names is None else [{"name": n} for n in names],
                    "allow_auto_topic_creation": (
                        self.allow_auto_create if allow_auto_create is None
                        else allow_auto_create and self.allow_auto_create
                    ),
                    "include_topic_authorized_operations": False,
                    "include_cluster_authorized_operations": False,
                },
            )
            self._apply_metadata(response, replace_all=names is None)

    def _apply_metadata(self, response: Any, replace_all: bool) -> None:
        brokers = {
            int(b.node_id): BrokerMetadata(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
            for b in response.brokers
        }
        if brokers:
            self.brokers = brokers
        self.controller_id = int(getattr(response, "controller_id", -1))
        self.cluster_id = getattr(response, "cluster_id", None)
        topics = {} if replace_all else self.topics
        for t in response.topics:
            parts = {
                int(p.partition_index): PartitionMetadata(
                    int(p.partition_index),
                    int(p.leader_id),
                    int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes),
                    tuple(int(r) for r in p.isr_nodes),
                    int(p.error_code),
                )
                for p in t.partitions
            }
            topics[t.name] = TopicMetadata(
                t.name, int(t.error_code), parts, bool(getattr(t, "is_internal", False)),
                getattr(t, "topic_id", None),
            )
        self.topics = topics
        self.partition_ids = {
            name: sorted(meta.partitions) for name, meta in topics.items()
            if not meta.error_code and meta.partitions
        }
        self.metadata_version += 1
        event, self.metadata_updated = self.metadata_updated, trio.Event()
        event.set()
        # Connections to brokers that left the cluster are closed.
        for node_id in list(self._connections):
            if 0 <= node_id and node_id not in self.brokers and node_id not in self._extra_addresses:
                conn = self._connections.pop(node_id)
                self._nursery.start_soon(conn.aclose)

    def partitions_for(self, topic: str) -> list[int] | None:
        """Sorted partition ids of ``topic`` if its metadata is known and usable, else None."""
        return self.partition_ids.get(topic)

    def forget_topic(self, topic: str) -> None:
        """Drop a (deleted) topic's metadata until a refresh brings it back."""
        self.topics.pop(topic, None)
        self.partition_ids.pop(topic, None)

    def leader_for(self, topic: str, partition: int) -> int:
        """Leader broker id of a partition, or -1 when unknown / leaderless."""
        meta = self.topics.get(topic)
        if meta is None:
            return -1
        p = meta.partitions.get(partition)
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return -1
        return p.leader

    async def wait_for_topic(self, topic: str, timeout: float) -> list[int]:
        """Refresh metadata until ``topic`` has partitions, for at most ``timeout`` seconds.

        Raises the topic's Kafka error (e.g. UnknownTopicOrPartitionError) or
        RequestTimedOutError naming the topic when it never appears.
        """
        parts = self.partitions_for(topic)
        if parts is not None:
            return parts
        backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
        last_error: BaseException | None = None
        with trio.move_on_after(timeout):
            for attempt in itertools.count():
                try:
                    await self.refresh_metadata([topic])
                except errors.KafkaError as exc:
                    last_error = exc
                    if not exc.retriable:
                        raise
                parts = self.partitions_for(topic)
                if parts is not None:
                    return parts
                meta = self.topics.get(topic)
                if meta is not None and meta.error_code:
                    err = errors.from_code(meta.error_code, f"topic {topic!r}")
                    if not err.retriable:
                        raise err
                    last_error = err
                await trio.sleep(backoff.backoff_ms(attempt) / 1000)
        detail = f" (last error: {last_error})" if last_error else ""
        raise errors.RequestTimedOutError(
            f"topic {topic!r} not present in metadata after {timeout * 1000:.0f} ms{detail}"
        )
