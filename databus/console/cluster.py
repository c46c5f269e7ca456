"""What the console reads from and does to a cluster, through ``databus.client`` only (as
the CLI tools do) and the groups' own logic (``databus.groups``: describe, lag, reset plans,
which ``databus groups`` prints too), so a page and ``databus groups describe`` never
disagree.

One ``Admin`` connection is kept for the console's life (``ClusterView.open``); reading
messages and producing open a short-lived Consumer/Producer per request.  Every method is
bounded by ``timeout`` seconds: a slow cluster gives an error page, never a hung request.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field

import trio

from databus.cli_helpers.times import parse_datetime
from databus.client import Admin, Consumer, KafkaError, Producer, TopicPartition, errors
from databus.groups import (
    GroupsError,
    ResetRequest,
    Session,
    execute_group_reset,
    group_document,
    list_group_states,
    load_group,
    plan_group_reset,
)
from databus.internal_topics import is_internal

from .view import Samples

log = logging.getLogger("databus.console")

CONSOLE_CLIENT_ID = "databus-console"
# The topic configs the cluster page shows (Kafka's names).
SHOWN_CONFIGS = ("retention.ms", "retention.bytes", "cleanup.policy")
RESET_TARGETS = ("earliest", "latest", "offset", "datetime", "shift-by")


class ConsoleError(Exception):
    """A refusal or failure shown to the user as one line (bad input, the cluster said no)."""


class AuthenticationFailed(ConsoleError):
    """The cluster refused the console's own credentials (its settings, not a user's)."""


class LoginRefused(ConsoleError):
    """The cluster refused a login's credentials; the message never says which part."""

    def __init__(self) -> None:
        super().__init__("invalid username or password")


class LoginThrottled(ConsoleError):
    """Too many refused logins lately from this address or for this user name: the cluster
    is not asked until ``retry_after`` seconds have passed."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"too many failed logins: try again in {self.retry_after} s")




@dataclass
class TopicRow:
    name: str
    partitions: int
    messages: int
    configs: dict[str, str | None]
    rate: float | None
    internal: bool = False
    size: int | None = None  # bytes on disk; None where the cluster does not say




@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    start: int
    end: int
    size: int | None = None

    @property
    def messages(self) -> int:
        return self.end - self.start


@dataclass
class GroupRow:
    group: str
    state: str
    protocol_type: str
    type: str
    lag: int | None = None


@dataclass
class Overview:
    brokers: list = field(default_factory=list)
    controller: int = -1
    topics: list[TopicRow] = field(default_factory=list)


class ClusterView:
    """The console's window on one cluster; ``samples`` holds lag per group
    (``("group", id)``) and summed end offsets per topic (``("topic", name)``)."""

    def __init__(self, bootstrap: str, settings: dict | None = None, *,
                 timeout: float = 15.0, user: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.user = user  # the logged-in user this view acts as (login mode), else None
        self.samples = Samples()
        self._admin: Admin | None = None
        # The cluster's TLS/SASL settings (a login's password among them): given to every
        # client the view makes, kept in memory only, never shown or logged.
        self._settings = dict(settings or {})

    def client_config(self, **extra) -> dict:
        """A client's settings: the console's client id, the connection settings, ``extra``."""
        return {"client.id": CONSOLE_CLIENT_ID, **self._settings, **extra}

    @contextlib.asynccontextmanager
    async def open(self):
        async with Admin(self.bootstrap, self.client_config(
                **{"request.timeout.ms": int(self.timeout * 1000)})) as admin:
            self._admin = admin
            try:
                yield self
            finally:
                self._admin = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            raise RuntimeError("ClusterView.open() first")
        return self._admin

    async def check_login(self) -> None:
        """Ask the cluster for metadata: the first connection logs in with the view's SASL
        settings.  LoginRefused when the cluster refuses them."""
        try:
            with trio.fail_after(self.timeout):
                await self.admin.cluster.refresh_metadata(all_topics=False)
        except trio.TooSlowError:
            raise ConsoleError(f"logging in: no answer from {self.bootstrap} within "
                               f"{self.timeout:g}s") from None
        except KafkaError as exc:
            if isinstance(exc, errors.SaslAuthenticationFailedError):
                raise LoginRefused() from None
            raise ConsoleError(f"logging in: {exc}") from None

    def _session(self) -> Session:
        return Session(self.admin.cluster, self.timeout)

    @contextlib.contextmanager
    def _bounded(self, what: str):
        """Errors as one line naming what was being done; never longer than ``timeout``."""
        try:
            with trio.fail_after(self.timeout):
                yield
        except trio.TooSlowError:
            raise ConsoleError(f"{what}: no answer from {self.bootstrap} within "
                               f"{self.timeout:g}s") from None
        except errors.AuthenticationError as exc:
            raise AuthenticationFailed(f"{what}: authentication failed: {exc}") from None
        except (KafkaError, GroupsError) as exc:
            raise ConsoleError(f"{what}: {exc}") from None

    # -- topics -------------------------------------------------------------------------

    async def overview(self) -> Overview:
        with self._bounded("reading the cluster"):
            described = await self.admin.describe_topics(None)
            topics = {n: d for n, d in described.items() if not isinstance(d, Exception)}
            configs = await self.admin.describe_configs(list(topics)) if topics else {}
            ends = await self._offsets(topics, "latest")
            starts = await self._offsets(topics, "earliest")
            sizes = await self._sizes(None)
            cluster = self.admin.cluster
            rows = []
            for name, desc in sorted(topics.items()):
                entries = configs.get(name)
                shown = {k: (entries[k].value if isinstance(entries, dict) and k in entries
                             else None) for k in SHOWN_CONFIGS}
                tps = [TopicPartition(name, p.partition) for p in desc.partitions]
                count = sum(ends.get(tp, 0) - starts.get(tp, 0) for tp in tps)
                size = sum(sizes.get(tp, 0) for tp in tps) if sizes else None
                rows.append(TopicRow(name, len(desc.partitions), count, shown,
                                     self.samples.rate(("topic", name)),
                                     is_internal(name, desc.is_internal), size))
            return Overview(sorted(cluster.brokers.values(), key=lambda b: b.node_id),
                            cluster.controller_id, rows)

    async def _sizes(self, topics: list[str] | None) -> dict[TopicPartition, int]:
        """Partition sizes on disk, or {} when the cluster will not say (DescribeLogDirs
        needs Kafka's cluster-level DESCRIBE permission): the pages then show '-'."""
        try:
            return await self.admin.describe_log_dirs(topics)
        except KafkaError as exc:
            log.info("no partition sizes: %s", exc)
            return {}

    async def _offsets(self, topics: dict, spec: str) -> dict[TopicPartition, int]:
        tps = [TopicPartition(name, p.partition) for name, d in topics.items()
               for p in d.partitions]
        return await self.admin.list_offsets(tps, spec) if tps else {}

    async def topic(self, name: str) -> list[PartitionRow]:
        with self._bounded(f"describing topic {name!r}"):
            desc = (await self.admin.describe_topics([name]))[name]
            if isinstance(desc, Exception):
                raise ConsoleError(str(desc))
            starts = await self._offsets({name: desc}, "earliest")
            ends = await self._offsets({name: desc}, "latest")
            sizes = await self._sizes([name])
            tps = [TopicPartition(name, p.partition) for p in desc.partitions]
            return [PartitionRow(p.partition, p.leader, list(p.replicas), starts.get(tp, 0),
                                 ends.get(tp, 0), sizes.get(tp))
                    for p, tp in zip(desc.partitions, tps)]

    async def create_topic(self, name: str, partitions: int,
                           configs: dict[str, str]) -> None:
        with self._bounded(f"creating topic {name!r}"):
            error = (await self.admin.create_topics({name: partitions},
                                                    configs=configs)).get(name)
            if error is not None:
                raise ConsoleError(f"creating topic {name!r}: {error}")

    async def delete_topic(self, name: str) -> None:
        with self._bounded(f"deleting topic {name!r}"):
            error = (await self.admin.delete_topics([name])).get(name)
            if error is not None:
                raise ConsoleError(f"deleting topic {name!r}: {error}")

    # -- messages -----------------------------------------------------------------------

    async def browse(self, topic: str, *, mode: str = "newest", partition: int | None = None,
                     offset: int | None = None, since: str | None = None,
                     limit: int = 20) -> list:
        """Up to ``limit`` records: ``newest`` first (across the chosen partitions), from
        ``offset`` of one partition, or from the first record at/after ``since`` (an
        ISO-8601 time, as ``databus groups reset-offsets --to-datetime`` reads it)."""
        limit = max(1, min(limit, 500))
        parts = await self.topic(topic)
        if partition is not None:
            parts = [p for p in parts if p.partition == partition]
            if not parts:
                raise ConsoleError(f"topic {topic!r} has no partition {partition}")
        tps = [TopicPartition(topic, p.partition) for p in parts]
        ends = {(topic, p.partition): p.end for p in parts}
        if mode == "offset":
            if partition is None or offset is None:
                raise ConsoleError("reading by offset needs a partition and an offset")
            start = {tps[0]: max(offset, parts[0].start)}
        elif mode == "time":
            if not since:
                raise ConsoleError("reading by time needs a date-time (ISO-8601)")
            try:
                ms = parse_datetime(since)
            except ValueError as exc:
                raise ConsoleError(str(exc)) from None
            with self._bounded(f"finding offsets of {topic!r} at {since}"):
                found = await self.admin.list_offsets(tps, ms)
            start = {tp: (o if o >= 0 else ends[tp]) for tp, o in found.items()}
        elif mode == "newest":
            start = {TopicPartition(topic, p.partition): max(p.start, p.end - limit)
                     for p in parts}
        else:
            raise ConsoleError(f"unknown mode {mode!r} (newest, offset or time)")
        records = await self._read(start, ends, limit)
        if mode == "newest":
            records.sort(key=lambda r: (r.timestamp, r.offset), reverse=True)
        else:
            records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
        return records[:limit]

    async def _read(self, start: dict, ends: dict, limit: int) -> list:
        """Records from ``start`` up to the ends seen before reading (``limit`` per
        partition at most): a quiet partition never keeps the page waiting."""
        wanted = {tp: off for tp, off in start.items() if off < ends[tp]}
        if not wanted:
            return []
        out: list = []
        taken = dict.fromkeys(wanted, 0)
        with self._bounded("reading messages"):
            async with Consumer(self.bootstrap, self.client_config()) as consumer:
                consumer.assign(list(wanted))
                for tp, off in wanted.items():
                    consumer.seek(tp, off)
                pending = set(wanted)
                while pending:
                    for r in await consumer.poll(timeout=1.0):
                        tp = (r.topic, r.partition)
                        if tp not in pending or r.offset < wanted[tp]:
                            continue
                        out.append(r)
                        taken[tp] += 1
                        if taken[tp] >= limit:
                            pending.discard(tp)
                    # The position, not the last record: a transaction's commit marker or a
                    # compacted tail ends a partition with an offset no record carries.
                    for tp in list(pending):
                        if await consumer.position(tp) >= ends[tp]:
                            pending.discard(tp)
        return out

    async def produce(self, topic: str, value: bytes | None, key: bytes | None,
                      headers: list[tuple[str, bytes]], partition: int | None):
        with self._bounded(f"producing to {topic!r}"):
            async with Producer(self.bootstrap, self.client_config(
                    **{"max.block.ms": int(self.timeout * 1000)})) as producer:
                future = await producer.send(topic, value, key=key, headers=headers or None,
                                             partition=partition)
                return await future.wait()

    # -- groups -------------------------------------------------------------------------

    async def groups(self) -> list[GroupRow]:
        with self._bounded("listing groups"):
            rows = await list_group_states(self._session())
        out = []
        for group, state, protocol_type, kind in rows:
            series = self.samples.series(("group", group))
            out.append(GroupRow(group, state, protocol_type, kind,
                                series[-1][1] if series else None))
        return out

    async def group(self, group: str) -> dict:
        """The group as ``databus groups describe --json`` documents it."""
        with self._bounded(f"describing group {group!r}"):
            session = self._session()
            view = await load_group(session, group)
            if view.state == "Dead" and not view.committed:
                raise ConsoleError(f"group {group!r} does not exist")
            return await group_document(session, group, view)

    async def plan_reset(self, group: str, topic: str | None, target: str,
                         value: str | None) -> tuple[list[tuple], object]:
        """[(topic, partition, current, new)] and the plan to hand to execute_reset."""
        args = reset_args(topic, target, value)
        with self._bounded(f"planning the reset of group {group!r}"):
            view, partitions, new, share = await plan_group_reset(self._session(), group, args)
        rows = [(t, p, view.committed.get((t, p)), new[(t, p)]) for t, p in partitions]
        return rows, (new, share)

    async def execute_reset(self, group: str, plan) -> None:
        new, share = plan
        with self._bounded(f"resetting the offsets of group {group!r}"):
            await execute_group_reset(self._session(), group, new, share)

    # -- sampling -----------------------------------------------------------------------

    async def sample_once(self) -> None:
        """One sample of every consumer group's total lag and every topic's end offsets."""
        now = time.monotonic()
        with self._bounded("sampling"):
            described = await self.admin.describe_topics(None)
            topics = {n: d for n, d in described.items() if not isinstance(d, Exception)}
            ends = await self._offsets(topics, "latest")
            for name in topics:
                self.samples.add(("topic", name), now,
                                 sum(o for (t, _), o in ends.items() if t == name))
            session = self._session()
            groups = [g for g, _state, _pt, kind in await list_group_states(session)
                      if kind != "share"]
            for group in groups:
                view = await load_group(session, group)
                committed = view.committed
                lag = sum(max(ends.get(tp, off) - off, 0) for tp, off in committed.items())
                self.samples.add(("group", group), now, lag)
        self.samples.forget_missing({("topic", t) for t in topics}
                                    | {("group", g) for g in groups})

    async def sample_forever(self, interval: float, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        last = None  # logged once per change, not every interval
        while True:
            try:
                await self.sample_once()
                if last is not None:
                    log.info("sampling works again")
                last = None
            except ConsoleError as exc:
                if str(exc) != last:
                    log.warning("%s%s", exc, "; pages show this until the console's "
                                "credentials are fixed (sasl.username / sasl.password)"
                                if isinstance(exc, AuthenticationFailed) else "")
                last = str(exc)
            await trio.sleep(interval)


def reset_args(topic: str | None, target: str, value: str | None) -> ResetRequest:
    """The console's reset form as ``databus groups reset-offsets`` options."""
    if target not in RESET_TARGETS:
        raise ConsoleError(f"unknown reset target {target!r} (one of {', '.join(RESET_TARGETS)})")
    args = ResetRequest(to_earliest=target == "earliest", to_latest=target == "latest",
                        all_topics=not topic, topic_partitions=[(topic, None)] if topic else [])
    try:
        if target == "offset":
            args.to_offset = int(value or "")
        elif target == "shift-by":
            args.shift_by = int(value or "")
        elif target == "datetime":
            args.timestamp = parse_datetime(value or "")
    except ValueError as exc:
        what = "a date-time (ISO-8601)" if target == "datetime" else "an integer"
        raise ConsoleError(f"reset to {target}: {value!r} is not {what}"
                           + (f" ({exc})" if target == "datetime" else "")) from None
    return args
