"""Stream -> route, and the routing decision for a produce frame.

A RoutingTable is built from one validated config, all at once, before it is applied: every
hook factory (``databus_route``, ``databus_partitioner`` through the producer pool) is called
here, once, so the hot path only looks a stream up in a dict and calls plain functions.  If
any factory fails the table is not built and the config is rejected.

``place_frame`` is the decision itself, for a whole frame: each message's route, its topic
(route plugins may change or drop it) and its partition, collected into a Group per
(route, topic, partition) in frame order.  One loop serves both paths: the fast one (known
metadata, no route plugins, no explicit partition: a dict lookup and the partitioner's
plain function) and the careful one (route plugins, metadata waited for, an explicit
partition checked, the size checked against the producer's limit).  Whatever keeps a
message from being placed, a plugin failure included, is answered in one place.

Delayed messages (docs/delayed.md) take the careful path: a message whose first header is
``databus-deliver-at`` goes to the delay topic of its remaining time on its route's cluster
(``delay/core.py``), one whose first header is ``databus-delay-cancel`` to the cancel topic.
So do half messages (docs/transactions.md): first header ``databus-txn`` or
``databus-txn-end``: to ``databus-txn-half``, in the partition of the transaction id
(``half/core.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import islice
from types import MappingProxyType
from typing import Any, Protocol

from databus.client.partitioners import murmur2_partition
from databus.config import DatabusConfig, broker_registry_url
from databus.hookspecs import Rejected, RoutedMessage  # noqa: F401  (the hook-level types; Rejected re-exported)
from databus.plugins import PluginError, PluginManager
from databus.protocol.records import record_size_upper_bound
from databus.protocol.sidecar_wire import (
    DELAY_CANCEL_HEADER,
    DELAY_DUE_HEADER,
    DELAY_ID_HEADER,
    TXN_END_HEADER,
    TXN_GROUP_HEADER,
    TXN_HEADER,
    ErrorCode,
)
from databus.protocol.speedups import load_native

from ..delay.core import (
    CANCEL_TOPIC,
    LEVEL_TOPICS,
    Delayed,
    DelayHeaderError,
    level_for,
    parse_due,
)
from ..half.core import COMMIT, HALF_TOPIC, ROLLBACK, end_headers, half_headers
from ..typed import TypedStream
from .upstream import ProducerHandle, ProducerPool, error_code_of, is_kafka_error

log = logging.getLogger("databus.sidecar.produce.router")

# Unlisted streams seen through the default route are remembered up to this many names;
# beyond it they are still served, just resolved again each time.
MAX_DYNAMIC_ROUTES = 10000
# Messages up to this size skip the per-message size check: far below any sane
# max.request.size (bigger ones take the careful path, checked against the producer's limit).
SMALL_MESSAGE = 64 * 1024
# place_frame's runs of plain keyless messages in C, _router_speedups.c beside this module
# (None: the loop takes each in Python)
_native = load_native(name="_router_speedups", package=__package__)
_place_run = _native.place_run if _native is not None else None
_SPECIAL_HEADERS = (DELAY_DUE_HEADER, DELAY_CANCEL_HEADER, TXN_HEADER, TXN_END_HEADER)
_NOT_APP_VALUES = (DELAY_CANCEL_HEADER, TXN_END_HEADER)


class Route:
    __slots__ = ("stream", "topic", "handle", "producer", "route_fns", "headers_only",
                 "max_block", "stats", "typed")

    def __init__(
        self,
        stream: str,
        topic: str,
        handle: ProducerHandle,
        route_fns: tuple[tuple[str, Callable], ...],
        stats: Any,
    ) -> None:
        self.stream = stream
        self.topic = topic
        self.handle = handle
        self.producer = handle.producer
        self.route_fns = route_fns
        # Every route function looks only at messages with headers (``needs_headers``):
        # messages without any keep the fast path.
        self.headers_only = bool(route_fns) and all(
            getattr(fn, "needs_headers", False) for _, fn in route_fns)
        self.max_block = handle.max_block_ms / 1000.0
        self.stats = stats
        # a typed stream's schema (typed.py): its messages take the careful path
        self.typed: TypedStream | None = None


class RoutingTable:
    def __init__(self, config: DatabusConfig, pm: PluginManager, metrics) -> None:
        self.config = config
        self._pm = pm
        self._metrics = metrics
        self.routes: dict[str, Route] = {}
        self.default_handle: ProducerHandle | None = None

    @classmethod
    async def build(
        cls,
        config: DatabusConfig,
        pm: PluginManager,
        pool: ProducerPool,
        bootstrap: dict[str, str],
        metrics,
    ) -> RoutingTable:
        """Make every route of ``config``; ``bootstrap`` maps cluster names to addresses
        (the embedded cluster's address is only known at run time)."""
        table = cls(config, pm, metrics)
        registry = broker_registry_url(config)
        for name, stream in config.streams.items():
            handle = await pool.get(config, name, bootstrap)
            route = table._make_route(name, config.route_topic(name), handle)
            if stream.schema_ is not None:
                route.typed = TypedStream(name, route.topic, stream.schema_, registry)
                await route.typed.start()  # ConfigError: the config is not applied
            table.routes[name] = route
        if config.default_route is not None:
            table.default_handle = await pool.get(config, None, bootstrap)
        return table

    def _make_route(self, stream: str, topic: str, handle: ProducerHandle) -> Route:
        settings = MappingProxyType(dict(handle.settings))
        fns = tuple(self._pm.call_each(
            "databus_route", stream=stream, topic=topic, settings=settings, config=self.config,
            bootstrap=handle.bootstrap,
        ))
        for plugin, fn in fns:
            if not callable(fn):
                raise PluginError(plugin, "databus_route", TypeError("did not return a callable"))
        return Route(stream, topic, handle, fns, self._metrics.stream(stream))

    def lookup(self, stream: str) -> Route | None:
        """The route for ``stream``, None for an unknown stream without a default route.
        Raises PluginError if a route factory fails for a new unlisted stream."""
        route = self.routes.get(stream)
        if route is not None or self.default_handle is None:
            return route
        route = self._make_route(stream, self.config.route_topic(stream), self.default_handle)
        if len(self.routes) < len(self.config.streams) + MAX_DYNAMIC_ROUTES:
            self.routes[stream] = route
        return route

    def handles(self) -> set[ProducerHandle]:
        out = {route.handle for route in self.routes.values()}
        if self.default_handle is not None:
            out.add(self.default_handle)
        return out


class _Dropped(Exception):
    """A route plugin dropped the message on purpose."""


class Answers(Protocol):
    """Who hears about messages of a frame: those not placed (their bytes are the
    caller's to give back) and, through their groups, those placed."""

    def reject(self, id_: int, size: int, code: int, message: str) -> None: ...

    def dropped(self, id_: int, size: int, topic: str) -> None: ...

    def group_done(self, group: Group, start: int, count: int, first_offset: int,
                   append_ms: int, error: BaseException | None) -> None: ...


class Group:
    """The messages of one produce frame bound for one (route, topic, partition), in frame
    order: queued on the producer together, answered a batch at a time (the producer's
    DeliverySink: ``batch_done`` goes to ``owner.group_done``)."""

    __slots__ = (
        "arrival", "ids", "own_timestamps", "owner", "partition", "records", "remaining",
        "route", "seq", "sizes", "timestamp", "topic", "total",
    )

    def __init__(self, owner: Answers, route: Route, topic: str, partition: int,
                 arrival: float, timestamp: int) -> None:
        self.owner = owner
        self.route = route
        self.topic = topic
        self.partition = partition
        self.arrival = arrival
        # The sidecar's clock (for messages without their own), or once queued, when some
        # had their own, every message's timestamp.
        self.timestamp: int | list[int] = timestamp
        self.own_timestamps = False
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self.records: list[tuple] = []
        self.remaining = 0
        self.total = 0
        self.seq = 0

    def batch_done(self, start: int, count: int, first_offset: int, append_ms: int,
                   error: BaseException | None) -> None:
        self.owner.group_done(self, start, count, first_offset, append_ms, error)


async def place_frame(
    table: RoutingTable,
    messages: list[tuple],
    sizes: list[int],
    arrival: float,
    now_ms: int,
    answers: Answers,
) -> list[Group]:
    """Route and partition ``messages`` (parsed, each ``sizes[i]`` bytes) into groups, in
    frame order.  A message that cannot be placed is answered through ``answers`` instead
    (``reject``, or ``dropped`` by a route plugin).  Waits only on the careful path (for a
    topic's metadata)."""
    routes = table.routes
    groups: dict[tuple, Group] = {}
    last_partition = last_topic = last_route = None
    current = route = typed = None  # the previous message's stream, its route and schema
    k = 0  # where the last run in C ended (runs look for their message from there on)
    pairs = zip(messages, sizes)
    for message, size in pairs:
        id_, stream, value, key, headers, partition, timestamp = message
        try:
            if stream != current:
                current = None
                route = routes.get(stream) or _lookup(table, stream)
                current = stream
                topic, producer = route.topic, route.producer
                partitions = producer.cached_partitions(topic)
                partitioner = producer.partitioner
                # the default partitioner's sticky partitions, when runs are taken in C
                sticky = producer.sticky_partitions
                runs = sticky is not None and _place_run is not None
                # The common case needs only the partitioner's plain function.
                simple = partitions is not None and (not route.route_fns or route.headers_only)
                plain = not route.route_fns
                count = len(partitions) if partitions else 0
                typed = route.typed
                if typed is not None:
                    runs = False  # (the runs in C would take the values unencoded)
            if typed is not None and not (headers and headers[0][0] in _NOT_APP_VALUES):
                # a typed stream's value checked and encoded (Rejected: this message only)
                value = typed.encode(value) if typed.fresh() else await typed.encode_later(
                    value)
            # The fast path: no explicit partition, a small message, and either no route
            # functions (then no header but the special ones of delayed and half messages
            # matters) or none that look at headers and no headers at all.
            if simple and partition is None and size <= SMALL_MESSAGE and (
                    not headers or (plain and headers[0][0] not in _SPECIAL_HEADERS)):
                try:
                    # A keyless message goes where the default partitioner's sticky
                    # partition is, as its call would say, without the call; out of range
                    # or unset, the call picks one.
                    if key is None and sticky is not None:
                        i = sticky.get(topic, -1)
                        if not 0 <= i < count:
                            i = partitioner(topic, key, value, count)
                    else:
                        i = partitioner(topic, key, value, count)
                    p = partitions[i]
                except Exception as exc:
                    raise PluginError(  # PluginError keeps exc as its cause
                        route.handle.partitioner_plugin, "partitioner", exc
                    ) from exc
                t = topic
                # In its topic's sticky partition: the plain keyless messages of the same
                # stream after it go there too (a run, below).
                run = runs and key is None and headers is None and sticky.get(topic) == i
            else:
                t, key, value, headers, p = await _place(
                    route, stream, key, value, headers, partition, now_ms
                )
                run = False
        except (Rejected, PluginError, _Dropped) as exc:
            unplaced(answers, id_, size, exc, route)
            continue
        if p != last_partition or t is not last_topic or route is not last_route:
            last_partition, last_topic, last_route = p, t, route
            group = groups.get((route, t, p))
            if group is None:
                group = groups[(route, t, p)] = Group(answers, route, t, p, arrival, now_ms)
            ids, group_sizes, records = group.ids, group.sizes, group.records
        ids.append(id_)
        group_sizes.append(size)
        if timestamp is None:
            timestamp = now_ms
        else:
            group.own_timestamps = True
        records.append((timestamp, key, value, headers))
        if run:
            # taken in C, up to the first message that is not a plain keyless one of this
            # stream (the per-message Python here was ~1/3 of the sidecar's CPU)
            k, taken, own = _place_run(messages, sizes, message, k, stream, SMALL_MESSAGE,
                                       now_ms, ids, group_sizes, records)
            next(islice(pairs, taken, taken), None)  # the loop goes on after them
            if own:
                group.own_timestamps = True
    return list(groups.values())


def unplaced(answers: Answers, id_: int, size: int, exc: Exception, route: Route | None) -> None:
    """Answer a message that was not placed: the one place where routing failures,
    plugin failures and drops become answers."""
    if isinstance(exc, _Dropped):
        route.stats.dropped += 1
        answers.dropped(id_, size, route.topic)
    elif isinstance(exc, PluginError):
        log.error("%s", exc)
        answers.reject(id_, size, ErrorCode.PLUGIN_ERROR, str(exc))
    else:
        answers.reject(id_, size, exc.code, str(exc))


def resolve(table: RoutingTable, stream: str) -> Route:
    """``stream``'s route; raises Rejected (unknown stream) or PluginError."""
    return table.routes.get(stream) or _lookup(table, stream)


def _lookup(table: RoutingTable, stream: str) -> Route:
    route = table.lookup(stream)  # PluginError if a route factory fails
    if route is None:
        raise Rejected(
            ErrorCode.UNKNOWN_STREAM,
            f"unknown stream {stream!r}: it is not in the sidecar's streams and there is "
            "no default_route",
        )
    return route


def _half(topic, key, value, headers, partition):
    """A half message's or an end record's place, and the transaction id that picks its
    partition: (topic, key, value, headers, partition, txn id)."""
    name, data = headers[0][0], headers[0][1]
    group = headers[1][1] if len(headers) > 1 and headers[1][0] == TXN_GROUP_HEADER else None
    if not data or not group:
        raise Rejected(ErrorCode.INVALID_MESSAGE,
                       f"{name} needs a transaction id and a {TXN_GROUP_HEADER} header after it")
    txn_id, group = bytes(data).decode(errors="replace"), bytes(group).decode(errors="replace")
    if name == TXN_END_HEADER:
        if value not in (COMMIT, ROLLBACK):
            raise Rejected(ErrorCode.INVALID_MESSAGE,
                           f"an end record's value is commit or rollback, not {value!r}")
        return HALF_TOPIC, None, value, end_headers(txn_id, group), None, bytes(data)
    stored = half_headers(txn_id, group, topic, partition, headers[2:])
    return HALF_TOPIC, key, value, stored, None, bytes(data)


def _delay(topic, key, value, headers, partition, now_ms: int):
    """A delayed message's or a cancel's place: (topic, key, value, headers, partition)."""
    name, data = headers[0][0], headers[0][1]
    if name == DELAY_CANCEL_HEADER:
        if not data:
            raise Rejected(ErrorCode.INVALID_MESSAGE, f"{DELAY_CANCEL_HEADER} needs an id")
        # compacted by id; the value is when it was cancelled (pruning, docs/delayed.md)
        return CANCEL_TOPIC, bytes(data), str(now_ms).encode(), [], None
    try:
        due = parse_due(data)
    except DelayHeaderError as exc:
        raise Rejected(ErrorCode.INVALID_MESSAGE, str(exc)) from None
    rest = headers[1:]
    delay_id = b""
    if rest and rest[0][0] == DELAY_ID_HEADER:
        delay_id, rest = rest[0][1] or b"", rest[1:]
    app_headers = [tuple(h) for h in rest]
    remaining = due - now_ms
    if remaining <= 0:
        return topic, key, value, app_headers, partition  # due already: deliver now
    delayed = Delayed(topic, due, delay_id.decode(errors="replace"), partition, key, value,
                      tuple(app_headers))
    # under LEAD_MS + 250 ms: the lowest level, ready 250 ms on (late only if due sooner)
    level = level_for(remaining) or 0
    return LEVEL_TOPICS[level], key, value, delayed.stored_headers(), None


async def _place(route: Route, stream, key, value, headers, partition, now_ms: int = 0):
    """The careful path for one message: route plugins, the topic's metadata (waited
    for), an explicit partition's existence, the size against the producer's limit.
    Returns (topic, key, value, headers, partition); raises Rejected, PluginError or
    _Dropped.  (A typed stream's value comes encoded: route plugins see what the topic
    will hold.)"""
    topic = route.topic
    if route.route_fns:
        msg = RoutedMessage(stream, topic, key, value, headers, partition)
        for plugin, fn in route.route_fns:
            try:
                msg = fn(msg)
                if msg is not None and type(msg) is not RoutedMessage:
                    msg = await msg  # a route that must wait first (hookspecs.databus_route)
            except Rejected:
                raise  # refused on purpose, with the plugin's own code and reason
            except Exception as exc:
                raise PluginError(plugin, "route", exc) from exc
            if msg is None:
                raise _Dropped
        topic, key, value = msg.topic, msg.key, msg.value
        headers, partition = msg.headers, msg.partition
    pick = None  # bytes whose murmur2 picks the partition (a transaction's id)
    if headers and headers[0][0] in _SPECIAL_HEADERS:
        if headers[0][0] in (TXN_HEADER, TXN_END_HEADER):
            topic, key, value, headers, partition, pick = _half(topic, key, value, headers,
                                                                partition)
        else:
            topic, key, value, headers, partition = _delay(topic, key, value, headers,
                                                           partition, now_ms)
    producer = route.producer
    try:
        partitions = producer.cached_partitions(topic) or await producer.partitions_for(topic)
    except Exception as exc:
        if not is_kafka_error(exc):
            raise
        raise Rejected(error_code_of(exc), str(exc)) from None
    size = record_size_upper_bound(key, value, headers)
    if size > producer.max_record_size:
        raise Rejected(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"message of about {size} bytes exceeds the producer's max.request.size or "
            f"buffer.memory ({producer.max_record_size} bytes)",
        )
    if pick is not None:
        partition = partitions[murmur2_partition(pick, len(partitions))]
    elif partition is None:
        try:
            partition = partitions[producer.partitioner(topic, key, value, len(partitions))]
        except Exception as exc:
            raise PluginError(route.handle.partitioner_plugin, "partitioner", exc) from exc
    elif partition not in partitions:
        raise Rejected(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"partition {partition} of topic {topic!r} does not exist "
            f"(it has {len(partitions)} partitions)",
        )
    return topic, key, value, headers, partition
