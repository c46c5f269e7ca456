"""The Iceberg sink object the runtime drives (hookspecs.databus_sink): records decoded into
Arrow as they come (columnar: ``write_columns`` takes the consumer's RecordColumns, json and
raw values to Arrow without an object per record; msgpack, the registry formats and a batch
with a bad value go per record), kept per table, and committed as one snapshot per table every
``commit.interval.ms`` (or ``commit.max.records``, or when partitions are revoked).

Exactly once: a partition's records count as durable only once the snapshot holding them,
with the partition's next offset in its summary, is committed; ``open`` reads where to
resume from the table's snapshots, not from the group's offsets (a kill -9 between the
catalog commit and the group's commit would otherwise write records twice).  Files a killed
commit left behind are deleted when the table is first opened (tables.remove_orphans).

With a registry format (avro, json_sr, protobuf) values are decoded per topic by the
subject's columns (decode.RegistryDecoder), and a new table is created from the subject.

A table that cannot take a batch (a type change Iceberg does not allow, or a subject version
its columns cannot follow: ``IncompatibleSchemaError``) stops: the error, naming the field,
is logged; what it took before still commits; its records are no longer taken (nothing of
them is reported durable, so they stay in Kafka for when the table is fixed and the sink
restarted) while the sink's other tables go on.  A commit that fails otherwise (the catalog
down, a full disk) keeps its batch and is tried again, with a backoff, while the other
tables go on (the files of the failed attempts are deleted once a commit succeeds); past
twice ``commit.max.records`` waiting the sink raises and the runtime restarts it from the
tables' offsets.  A catalog that cannot be reached when a table is opened raises
``CatalogUnavailable`` (the runtime retries the sink with its backoff).  Blocking work runs
in a worker thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import pyarrow as pa

# pyiceberg's catalog and writer, imported with the sink (when the configuration is read):
# importing them in ``open`` would hold up the group's join long enough to miss heartbeats.
import pyiceberg.catalog.sql  # noqa: F401
import pyiceberg.io.pyarrow  # noqa: F401
import pyiceberg.table  # noqa: F401
import trio

from databus.client import ConsumerRecord
from databus.schemas.columns import IncompatibleSchemaError

from . import tables
from .decode import KAFKA_FIELDS, Decoder, RegistryDecoder, declared_fields
from .options import Options
from .schema import IncompatibleField

log = logging.getLogger("databus_plugins.iceberg")

RETRY_BACKOFF_S = (1.0, 60.0)
FAILED_LOG_INTERVAL_S = 60.0


class CatalogUnavailable(Exception):
    """The catalog could not be reached (or read) when a table was opened."""


@dataclass
class _Table:
    name: str
    table: object | None = None  # pyiceberg Table; None until created by the first commit
    # (rows or None, partition, next offset): in the order taken; None when every record
    # of the write was dead-lettered (its offsets still move the table's on)
    chunks: list[tuple[pa.Table | None, tuple[str, int], int]] = field(default_factory=list)
    rows: int = 0
    taken: dict[tuple[str, int], int] = field(default_factory=dict)  # next offset handed
    last_commit: float = field(default_factory=time.monotonic)
    failed: str | None = None  # a refused schema change: the table is stopped
    failed_logged: float = 0.0
    retry_at: float = 0.0  # after a failed commit
    failures: int = 0
    failing_since_ms: float | None = None  # wall clock of the first failed commit in a row
    cleaned: bool = False


class IcebergSink:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.declared = declared_fields(options.schema) if options.schema else None
        self.decoder = Decoder(options.format)
        self.registry_decoders: dict[str, RegistryDecoder] = {}  # by topic
        self.catalog = None
        self.tables: dict[str, _Table] = {}
        self.parts: dict[tuple[str, int], str] = {}  # partition -> table name
        self.durable: dict[tuple[str, int], int] = {}
        self.commits = 0

    # -- the sink methods ------------------------------------------------------------------

    async def open(self, tp, committed):
        return await trio.to_thread.run_sync(self._open, tuple(tp), committed)

    async def write(self, tp, records):
        return await trio.to_thread.run_sync(self._write, tuple(tp), records)

    async def write_columns(self, tp, columns):
        return await trio.to_thread.run_sync(self._write_columns, tuple(tp), columns)

    async def flush(self, partitions, force):
        return await trio.to_thread.run_sync(self._flush, partitions, force)

    async def close(self, partitions):
        for tp in partitions:
            tp = tuple(tp)
            self.durable.pop(tp, None)
            name = self.parts.pop(tp, None)
            state = self.tables.get(name)
            if state is not None:
                state.taken.pop(tp, None)
                if name not in self.parts.values():
                    del self.tables[name]

    async def aclose(self):
        self.tables.clear()
        self.parts.clear()

    # -- the work (worker thread) ----------------------------------------------------------

    def _open(self, tp, committed):
        name = self.options.table_name(tp[0])
        state = self.tables.get(name)
        if state is None:
            state = self.tables[name] = _Table(name)
        try:
            if self.catalog is None:
                self.catalog = tables.open_catalog(self.options.catalog)
            if state.table is None:
                state.table = tables.load_table(self.catalog, name)
            else:
                state.table.refresh()
        except Exception as exc:
            # Raised: the runtime restarts the sink with its backoff, from the tables'
            # offsets; nothing was taken, so nothing is lost.
            where = f"{self.options.catalog.get('type', 'sql')} catalog " \
                    f"{self.options.catalog.get('uri', '')}"
            log.error("%s: the %s is unavailable (%s: %s)", name, where, type(exc).__name__,
                      _reason(exc))
            raise CatalogUnavailable(f"table {name}: the {where} is unavailable: "
                                     f"{type(exc).__name__}: {_reason(exc)}") from None
        self.parts[tp] = name
        start = None
        if state.table is not None:
            if not state.cleaned:
                removed = tables.remove_orphans(state.table, self.options.orphan_min_age_ms)
                if removed:
                    log.info("%s: removed %d file(s) of an unfinished commit", name,
                             len(removed))
                state.cleaned = True
            start = tables.table_offsets(state.table).get(tp)
        if start is not None and start != committed:
            log.info("%s-%d: resuming at offset %d, where table %s's snapshots end (the "
                     "group's committed offset: %s)", tp[0], tp[1], start, name, committed)
        self.durable[tp] = start if start is not None else committed
        return start

    def _stopped(self, state: _Table) -> bool:
        if state.failed is None:
            return False
        now = time.monotonic()
        if now - state.failed_logged >= FAILED_LOG_INTERVAL_S:
            log.error("table %s is stopped: %s", state.name, state.failed)
            state.failed_logged = now
        return True  # the write is not taken: nothing of it is reported durable

    def _write(self, tp, records):
        state = self.tables[self.parts[tp]]
        if self._stopped(state):
            return None
        decoder = self._decoder(tp[0])
        try:
            table, rejected = decoder.table(records)
        except IncompatibleSchemaError as exc:
            # Nothing of this write is taken: what the table took before it still commits
            # (flush), nothing past it.
            state.failed = f"{type(exc).__name__}: {exc}"
            state.failed_logged = time.monotonic()
            log.error("table %s is stopped: %s; its records stay in Kafka (from offset %d of "
                      "%s-%d) and the sink's other tables go on", state.name, state.failed,
                      records[0].offset, tp[0], tp[1])
            return None
        self._take(state, tp, table, records[-1].offset + 1)
        return rejected

    def _write_columns(self, tp, columns):
        """``_write`` for a columnar batch (RecordColumns): json and raw values go to Arrow
        straight through (decode.Decoder.table_of_columns); a batch with a value that does
        not decode that way, msgpack and the registry formats go the per-record way (which
        finds and rejects the bad ones).  Returns ``[(row, reason)]``."""
        state = self.tables[self.parts[tp]]
        if self._stopped(state):
            return None
        table = None
        if self.options.registry_url is None:
            table = self.decoder.table_of_columns(columns.to_arrow())
        if table is None:
            records = [ConsumerRecord(columns.topic, columns.partition, o, ts, 0, k, v, h)
                       for o, ts, k, v, h in columns.rows()]
            index = {r.offset: i for i, r in enumerate(records)}
            return [(index[r.offset], reason) for r, reason in self._write(tp, records) or ()]
        self._take(state, tp, table, columns.offsets[-1] + 1)
        return None

    def _take(self, state: _Table, tp, table: pa.Table | None, next_offset: int) -> None:
        state.chunks.append((table, tp, next_offset))
        state.rows += table.num_rows if table is not None else 0
        state.taken[tp] = next_offset

    def _decoder(self, topic: str) -> Decoder:
        if self.options.registry_url is None:
            return self.decoder
        decoder = self.registry_decoders.get(topic)
        if decoder is None:
            assert self.options.registry_type is not None
            decoder = self.registry_decoders[topic] = RegistryDecoder(
                self.options.registry_url, topic, self.options.registry_type)
        return decoder

    def _flush(self, partitions, force: bool):
        now = time.monotonic()
        asked = {tuple(tp) for tp in partitions}
        for state in list(self.tables.values()):
            if not self._pending(state) or (state.failed is not None and not state.chunks):
                continue  # (a stopped table still commits what it took before it stopped)
            due = (state.rows >= self.options.commit_max_records
                   or now - state.last_commit >= self.options.commit_interval_ms / 1000
                   or (force and asked & set(state.taken)))
            if due and (force or now >= state.retry_at):
                self._commit(state, now)
        return {tp: n for tp, n in self.durable.items() if n is not None and tp in asked}

    def _pending(self, state: _Table) -> bool:
        return any(self.durable.get(tp) is None or n > self.durable[tp]
                   for tp, n in state.taken.items())

    def _commit(self, state: _Table, now: float) -> None:
        """Commit what the table has taken: one snapshot, or one per run of batches whose
        types can share a table (a run stops where a field changes type, so the snapshots
        before a refused change still commit)."""
        while state.chunks:
            run = _run(state.chunks)
            if not self._commit_run(state, run, now):
                return
            del state.chunks[:len(run)]
            state.rows -= sum(t.num_rows for t, _tp, _n in run if t is not None)
        if state.failing_since_ms is not None and state.table is not None:
            # The failed attempts may have left files (a data file cut short by a full disk,
            # metadata the catalog never took): not the table's, so deleted.
            try:
                removed = tables.remove_orphans(state.table, self.options.orphan_min_age_ms,
                                                since_ms=state.failing_since_ms - 1000)
            except OSError as exc:
                log.warning("%s: files of the failed commits not removed: %s", state.name, exc)
            else:
                if removed:
                    log.info("%s: removed %d file(s) of the failed commits", state.name,
                             len(removed))
            log.info("table %s: committed again after %d failed attempt(s)", state.name,
                     state.failures)
        state.failures = 0
        state.failing_since_ms = None
        state.last_commit = now

    def _subject_fields(self, run) -> list[pa.Field] | None:
        """A new table's value columns from the registry: its first topic's subject."""
        if self.options.registry_url is None:
            return None
        decoder = self._decoder(_topics(run)[0])
        assert isinstance(decoder, RegistryDecoder)
        return decoder.value_fields()

    def _commit_run(self, state: _Table, run, now: float) -> bool:
        tables_ = [t for t, _tp, _n in run if t is not None]
        taken: dict[tuple[str, int], int] = {}
        for _t, tp, offset in run:
            taken[tp] = offset
        try:
            batch = (pa.concat_tables(tables_, promote_options="permissive") if tables_
                     else pa.schema(KAFKA_FIELDS).empty_table())
            if state.table is None:
                value_fields = (self.declared or self._subject_fields(run)
                                or list(batch.schema)[len(KAFKA_FIELDS):])
                state.table = tables.create_table(self.catalog, state.name, value_fields,
                                                  self.options)
                log.info("created table %s (%s)", state.name, ", ".join(
                    f"{f.name} {f.field_type}" for f in state.table.schema().fields))
            state.table = tables.commit(state.table, batch, taken, self.options.evolve)
        except IncompatibleField as exc:
            state.failed = str(exc)
            state.failed_logged = now
            state.chunks.clear()
            state.rows = 0
            log.error("table %s is stopped: %s; its records stay in Kafka (from offsets %s) "
                      "and the sink's other tables go on", state.name, exc,
                      {f"{t}-{p}": self.durable.get((t, p)) for t, p in sorted(state.taken)})
            return False
        except Exception as exc:
            state.failures += 1
            if state.failing_since_ms is None:
                state.failing_since_ms = time.time() * 1000
            delay = min(RETRY_BACKOFF_S[0] * 2 ** (state.failures - 1), RETRY_BACKOFF_S[1])
            state.retry_at = now + delay
            if state.rows > 2 * self.options.commit_max_records:
                raise RuntimeError(f"table {state.name}: commits fail ({exc}) and "
                                   f"{state.rows} records wait") from exc
            log.error("table %s: commit failed (%s: %s); nothing of it is in the table, the "
                      "batch is kept and tried again in %.0f s", state.name,
                      type(exc).__name__, _reason(exc), delay)
            return False
        for tp, offset in taken.items():
            if tp in self.parts:
                self.durable[tp] = offset
        self.commits += 1
        return True



def _reason(exc: BaseException) -> str:
    """An exception's message on one line, without SQLAlchemy's statement and its link."""
    text = " ".join(str(exc).split())
    return text.split(" [SQL:")[0][:500]


def _topics(run) -> list[str]:
    return list(dict.fromkeys(tp[0] for _t, tp, _n in run))


def _run(chunks) -> list:
    """The longest prefix of ``chunks`` whose tables' schemas unify."""
    schemas_ = []
    for i, (table, _tp, _n) in enumerate(chunks):
        if table is None:
            continue
        try:
            pa.unify_schemas([*schemas_, table.schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return chunks[:i]
        schemas_ = [pa.unify_schemas([*schemas_, table.schema], promote_options="permissive")]
    return list(chunks)
