"""The sinks runtime's trio shell: one ``SinkRunner`` per sink, and the ``SinkSupervisor``
that starts, stops and restarts them as configurations come and go.

A runner is a consumer group member (``group.id``, default ``databus-sink-NAME``) that hands
each polled batch to its plugin's sink object, sends the records the sink rejects to the
dead-letter topic (and waits for their acknowledgement), asks the sink what is durable
(``flush(partitions, force=False)``) and commits exactly that.  When partitions are revoked
(a rebalance, a stop, a reload) it forces a flush of them, commits, and closes them; the
next owner starts from those offsets.  Nothing is committed that the sink did not report
durable, so a crash (even kill -9) only means records after the last commit are handed to
a sink again.

Plugin calls never overlap: one lock covers the poll loop's calls and the rebalance
callbacks (which run in the consumer's group task).  A sink method that raises marks the
runner broken: its partitions are released without flushing (they were never committed), the
error is logged and counted, and the runner starts again from the committed offsets after a
backoff (1 s doubling to 60 s), with a new sink object from the factory.  Other sinks and
the sidecar never notice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from databus.client import AuthenticationError, Consumer, ConsumerRecord, KafkaError, Producer
from databus.config import DatabusConfig, broker_registry_url
from databus.lanes.model import DEFAULT_TEMPLATE
from databus.plugins import PluginError, PluginManager, make_sink
from databus.protocol.columns import RecordColumns
from databus.sinks.config import SinkConfig

from .core import PluginReportError, SinkProgress, TopicPartition, dead_letter_headers

log = logging.getLogger("databus.sinks")

POLL_TIMEOUT_S = 1.0  # also how often a quiet sink gets flush(force=False) (time-based rolls)
LAG_INTERVAL_S = 5.0
RESTART_BACKOFF_S = (1.0, 60.0)


class SinkFailed(Exception):
    """A sink's plugin raised (or reported nonsense); the runner restarts it."""


class SinkRunner:
    def __init__(
        self, name: str, spec: SinkConfig, bootstrap: str, pm: PluginManager,
        plugin: str, sink: Any, *, security: dict | None = None,
        lane_template: str = DEFAULT_TEMPLATE, registry: str | None = None,
    ) -> None:
        self.name = name
        self.registry = registry  # the file's schema registry (a plugin's default)
        self.spec = spec
        self.lane_template = lane_template  # (lane topics' names: sidecar.yaml's lanes.topic)
        self.bootstrap = bootstrap
        self.security = dict(security or {})
        self.pm = pm
        self.plugin = plugin
        self._next_sink = sink  # made (and so validated) by the supervisor's prepare
        self.progress = SinkProgress()
        self.running = False
        self.last_error: str | None = None
        self.done = trio.Event()
        self._stop = trio.Event()
        self._poll_scope: trio.CancelScope | None = None
        self._lock = trio.Lock()
        self._sink: Any = None
        self._consumer: Consumer | None = None
        self._broken: BaseException | None = None

    def request_stop(self) -> None:
        """Stop after the current batch: flush and commit every partition, leave the group."""
        self._stop.set()
        if self._poll_scope is not None:
            self._poll_scope.cancel()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        failures = 0
        try:
            while not self._stop.is_set():
                sink = self._next_sink
                self._next_sink = None
                try:
                    if sink is None:
                        self.plugin, sink = make_sink(self.pm, self.spec.plugin, self.spec.config,
                                                     self.registry)
                    await self._run_once(sink)
                    failures = 0
                except Exception as exc:
                    self.progress.errors += 1
                    failures += 1
                    delay = min(RESTART_BACKOFF_S[0] * 2 ** (failures - 1), RESTART_BACKOFF_S[1])
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    log.error(
                        "sink %r (plugin %r) failed: %s; restarting from the committed "
                        "offsets in %.0f s", self.name, self.plugin, self.last_error, delay,
                        exc_info=not isinstance(exc, (SinkFailed, KafkaError)),
                    )
                    with trio.move_on_after(delay):
                        await self._stop.wait()
        finally:
            self.running = False
            self.done.set()

    async def _run_once(self, sink: Any) -> None:
        self._sink, self._broken = sink, None
        self.progress.partitions.clear()
        self.progress.end_offsets.clear()
        config = self.spec.consumer_config(self.name, self.security)
        dlq_config = {"client.id": f"databus-sink-{self.name}-dlq", "linger.ms": 5,
                      **self.security}
        try:
            consumer = Consumer(
                self.bootstrap, config,
                on_assigned=self._on_assigned, on_revoked=self._on_revoked,
            )
            # The consumer closes first: its revocation flushes and commits, needing no DLQ.
            async with Producer(self.bootstrap, dlq_config) as dlq, consumer:
                self._consumer = consumer
                # The sink's lanes (docs/lanes.md): by default the main lane only.
                topics, pattern = self.spec.selection(self.lane_template)
                if pattern is not None:
                    consumer.subscribe(pattern=pattern)
                else:
                    consumer.subscribe(topics)
                self.running = True
                log.info("sink %r (plugin %r) consuming %s (lanes: %s) as group %r", self.name,
                         self.plugin, topics or pattern, self.spec.lanes, config.group_id)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._lag_loop, consumer)
                    await self._consume(consumer, sink, dlq)
                    nursery.cancel_scope.cancel()
                # A graceful stop: release every partition while the consumer can still
                # commit (its close() runs the revocation after it stopped committing).
                await self._on_revoked(self.progress.owned())
            if self._broken is not None:
                raise self._broken
        finally:
            self.running = False
            self._consumer = None
            await self._quietly_aclose(sink)

    async def _consume(self, consumer: Consumer, sink: Any, dlq: Producer) -> None:
        # A sink with ``write_columns`` gets each partition's records as columns
        # (RecordColumns, from getmany_columns: no object per record); any other sink gets
        # ConsumerRecords through ``write`` (the per-record adapter, hookspecs.databus_sink).
        columnar = callable(getattr(sink, "write_columns", None))
        limit = consumer.config.max_poll_records
        while not self._stop.is_set():
            batches: Mapping[TopicPartition, Any] = {}
            with trio.CancelScope() as scope:
                self._poll_scope = scope
                if self._stop.is_set():
                    break
                try:
                    if columnar:
                        batches = await consumer.getmany_columns(timeout=POLL_TIMEOUT_S,
                                                                 max_records=limit)
                    else:
                        batches = await consumer.getmany(timeout=POLL_TIMEOUT_S)
                except AuthenticationError:
                    # Refused credentials (the client logs them once and keeps logging in
                    # again): keep the sink and its partitions and poll again, rather than
                    # restart it with a backoff that would delay the recovery.
                    await trio.sleep(consumer.config.reconnect_backoff_max_ms / 1000)
            self._poll_scope = None
            async with self._lock:
                if self._broken is not None:
                    raise self._broken
                now = trio.current_time()
                for tp, records in batches.items():
                    if not records:
                        continue
                    first, last = ((records.offsets[0], records.offsets[-1]) if columnar
                                   else (records[0].offset, records[-1].offset))
                    if not self.progress.owns(tp):
                        if tp in consumer.assignment():
                            # Fetched before on_assigned opened it: read these again once
                            # it is open (dropping them would skip them for good).
                            consumer.seek(tp, first)
                        continue  # else revoked meanwhile: the next owner reads them
                    if columnar:
                        rows = await self._call("write_columns", sink.write_columns, tp, records)
                        rejected = [(_record_at(records, i), reason) for i, reason in rows or ()]
                    else:
                        rejected = await self._call("write", sink.write, tp, records)
                    self.progress.handed(tp, len(records), last + 1, now)
                    if rejected:
                        await self._dead_letter(dlq, rejected)
                owned = self.progress.owned()
                if owned:
                    reported = await self._call("flush", sink.flush, owned, False)
                    await self._commit(consumer, reported)

    async def _call(self, method: str, fn: Callable, *args: Any) -> Any:
        """A sink method; whatever it raises becomes SinkFailed naming the plugin."""
        try:
            return await fn(*args)
        except Exception as exc:
            failure = SinkFailed(
                f"plugin {self.plugin!r} raised in {method}: {type(exc).__name__}: {exc}"
            )
            failure.__cause__ = exc
            self._broken = failure  # the revocation that follows must not flush this sink
            raise failure from exc

    async def _commit(self, consumer: Consumer, reported: Any) -> None:
        try:
            offsets = self.progress.to_commit(reported)
        except PluginReportError as exc:
            raise SinkFailed(f"plugin {self.plugin!r}: {exc}") from None
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:
            # A rebalance under way: the revocation flushes and commits again.
            log.warning("sink %r: commit failed (%s); retried at the next flush", self.name, exc)
            return
        self.progress.committed(offsets, trio.current_time())

    async def _dead_letter(self, dlq: Producer, rejected: Sequence) -> None:
        topic = self.spec.dead_letters(self.name)
        futures = []
        for record, reason in rejected:
            headers = dead_letter_headers(
                self.name, record.headers, record.topic, record.partition, record.offset,
                str(reason),
            )
            log.warning("sink %r: %s-%d@%d to %s: %s", self.name, record.topic,
                        record.partition, record.offset, topic, reason)
            futures.append(await dlq.send(
                topic, record.value, key=record.key, headers=headers,
                timestamp_ms=record.timestamp,
            ))
        # Nothing past a rejected record is committed before the DLQ holds it.
        for future in futures:
            await future.wait()
        self.progress.dead_letters += len(futures)

    # -- rebalance callbacks (the consumer's group task) ----------------------------------

    async def _on_assigned(self, partitions: list[TopicPartition]) -> None:
        async with self._lock:
            if self._broken is not None or self._consumer is None:
                return
            try:
                for tp in partitions:
                    committed = await self._consumer.committed(tp)
                    self.progress.assigned(tp, committed)
                    start = await self._call("open", self._sink.open, tp, committed)
                    if start is not None and start != committed:
                        # The sink keeps its own durable offsets (with its data, in one
                        # transaction): read from there, not from the group's.
                        self._consumer.seek(tp, int(start))
                        self.progress.assigned(tp, int(start))
            except SinkFailed as exc:
                self._fail(exc)
            except KafkaError as exc:
                self._fail(exc)

    async def _on_revoked(self, partitions: list[TopicPartition]) -> None:
        async with self._lock:
            owned = [tp for tp in partitions if self.progress.owns(tp)]
            try:
                if owned and self._broken is None and self._consumer is not None:
                    reported = await self._call("flush", self._sink.flush, owned, True)
                    await self._commit(self._consumer, reported)
                    await self._call("close", self._sink.close, owned)
            except SinkFailed as exc:
                self._fail(exc)
            finally:
                for tp in owned:
                    self.progress.revoked(tp)

    def _fail(self, exc: BaseException) -> None:
        """Remember the failure; the poll loop raises it (a callback cannot)."""
        self._broken = exc
        if self._poll_scope is not None:
            self._poll_scope.cancel()

    async def _lag_loop(self, consumer: Consumer) -> None:
        while True:
            owned = self.progress.owned()
            if owned:
                try:
                    ends = await consumer.end_offsets(owned)
                    self.progress.end_offsets.update(
                        {tp: end for tp, end in ends.items() if self.progress.owns(tp)}
                    )
                    if hasattr(self._sink, "trim"):
                        await self._trim(consumer, owned)
                except KafkaError as exc:
                    log.debug("sink %r: end offsets: %s", self.name, exc)
            await trio.sleep(LAG_INTERVAL_S)

    async def _trim(self, consumer: Consumer, owned: list[TopicPartition]) -> None:
        """Tell a sink that keeps records' locations (an index) where each partition's log
        now starts: what is before was removed by the cluster's retention."""
        starts = await consumer.beginning_offsets(owned)
        async with self._lock:
            if self._broken is not None:
                return
            starts = {tp: n for tp, n in starts.items() if self.progress.owns(tp) and n >= 0}
            if starts:
                try:
                    await self._call("trim", self._sink.trim, starts)
                except SinkFailed as exc:
                    self._fail(exc)

    async def _quietly_aclose(self, sink: Any) -> None:
        try:
            await sink.aclose()
        except Exception:
            log.exception("sink %r: plugin %r failed in aclose (ignored)", self.name, self.plugin)


@dataclass
class _Planned:
    spec: SinkConfig
    bootstrap: str
    security: dict = field(default_factory=dict)  # the cluster's TLS/SASL client settings
    lane_template: str = DEFAULT_TEMPLATE
    registry: str | None = None  # the file's schema registry URL (broker section)
    plugin: str | None = None  # None: unchanged, keep the running runner
    sink: Any = None


class SinkSupervisor:
    """Runs the sinks of the configuration in force; ``prepare`` + ``apply`` is a reload."""

    def __init__(
        self, pm: PluginManager, bootstrap_map: Callable[[DatabusConfig], dict[str, str]],
        *, stop_timeout: float = 30.0,
    ) -> None:
        self.pm = pm
        self.bootstrap_map = bootstrap_map
        self.stop_timeout = stop_timeout
        self.runners: dict[str, SinkRunner] = {}
        self._nursery: trio.Nursery | None = None
        self._lock = trio.Lock()

    def prepare(self, config: DatabusConfig) -> dict[str, _Planned]:
        """Validate a configuration's sinks: make a sink object for every new or changed
        sink (raises ValueError / PluginError naming the sink, so the configuration is
        rejected); unchanged sinks are kept as they run."""
        plan: dict[str, _Planned] = {}
        sinks = config.all_sinks()
        bootstraps = self.bootstrap_map(config) if sinks else {}
        template = config.lanes.topic if config.lanes is not None else DEFAULT_TEMPLATE
        registry = broker_registry_url(config)
        for name, spec in sinks.items():
            cluster = config.resolve_cluster(spec.cluster, f"sink {name!r}")
            known = config.clusters.get(cluster)
            planned = _Planned(spec, bootstraps[cluster],
                               known.connection_settings() if known is not None else {},
                               lane_template=template, registry=registry)
            running = self.runners.get(name)
            if running is None or (running.spec, running.bootstrap, running.security,
                                   running.lane_template, running.registry) != (
                    spec, planned.bootstrap, planned.security, template, registry):
                try:
                    planned.plugin, planned.sink = make_sink(self.pm, spec.plugin, spec.config,
                                                             registry)
                except (ValueError, PluginError) as exc:
                    raise ValueError(f"sink {name!r}: {exc}") from None
            plan[name] = planned
        return plan

    async def apply(self, plan: dict[str, _Planned]) -> None:
        async with self._lock:
            assert self._nursery is not None, "serve() first"
            going = [r for name, r in self.runners.items()
                     if name not in plan or plan[name].plugin is not None]
            await self._stop(going)
            for runner in going:
                del self.runners[runner.name]
            for name, planned in plan.items():
                if planned.plugin is None:
                    continue
                runner = SinkRunner(
                    name, planned.spec, planned.bootstrap, self.pm, planned.plugin, planned.sink,
                    security=planned.security, lane_template=planned.lane_template,
                    registry=planned.registry,
                )
                self.runners[name] = runner
                await self._nursery.start(runner.run)

    async def serve(self, plan: dict[str, _Planned], *, task_status=trio.TASK_STATUS_IGNORED):
        """Run the planned sinks until cancelled (``aclose`` stops them gracefully first)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.apply(plan)
            task_status.started()
            await trio.sleep_forever()

    async def aclose(self) -> None:
        """Stop every sink gracefully: flush, commit, leave the group."""
        async with self._lock:
            runners = list(self.runners.values())
            await self._stop(runners)
            self.runners.clear()

    async def _stop(self, runners: list[SinkRunner]) -> None:
        for runner in runners:
            runner.request_stop()
        with trio.move_on_after(self.stop_timeout) as scope:
            for runner in runners:
                await runner.done.wait()
        if scope.cancelled_caught:
            log.warning("sinks did not stop within %.0f s", self.stop_timeout)


def _record_at(columns: RecordColumns, i: int) -> ConsumerRecord:
    """Row ``i`` of a columnar batch as the ConsumerRecord the dead-letter path reads (only
    for the rows a sink rejects)."""
    return ConsumerRecord._make((columns.topic, columns.partition, columns.offsets[i],
                                 columns.timestamps[i], 0, columns.key(i), columns.value(i),
                                 columns.headers(i)))
