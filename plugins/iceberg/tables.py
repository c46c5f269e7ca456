"""The catalog and its tables (pyiceberg; blocking: the sink calls these in a worker thread).

``commit`` is the exactly-once step: in one catalog transaction it evolves the schema (if the
batch needs it), appends the batch's data files, and records in the new snapshot's summary
the offsets the table has now taken (options.py).  If the catalog refuses the commit because
another writer committed first, it is built again on the new snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow as pa

from . import schema as schemas
from .decode import KAFKA_FIELDS
from .options import (
    OFFSETS_PROPERTY,
    Offsets,
    Options,
    Transform,
    encode_offsets,
    merged_offsets,
    resume_offsets,
)

log = logging.getLogger("databus_plugins.iceberg")

COMMIT_ATTEMPTS = 5


def open_catalog(properties: Mapping[str, str]):
    """The catalog (its ``name``, default ``databus``, is the SQL catalog's key for its
    tables: readers load the catalog by the same name)."""
    from pyiceberg.catalog import load_catalog

    props = dict(properties)
    name = props.pop("name", "databus")
    if props.get("type", "sql") == "sql":
        for key in ("uri", "warehouse"):
            local = local_path(props.get(key, ""))
            if local:
                os.makedirs(local if key == "warehouse" else os.path.dirname(local),
                            exist_ok=True)
    for attempt in range(3):
        try:
            catalog = load_catalog(name, **props)
            break
        except Exception as exc:
            # A SQL catalog creates its tables when first opened, which is not safe against
            # another process (a second sink, `databus iceberg`, a reader) doing it at the
            # same moment: the loser's CREATE TABLE fails; the tables are there now.
            if "already exists" not in str(exc) or attempt == 2:
                raise
            time.sleep(0.1)
    if props.get("type", "sql") == "sql" and props.get("uri", "").startswith("sqlite:///"):
        _write_ahead_log(local_path(props["uri"]) or "")  # (once its tables exist)
    return catalog


def _write_ahead_log(path: str) -> None:
    """Put the SQLite catalog in WAL mode (kept in the file, so for every connection): its
    readers — pyiceberg scans, DuckDB, the console, ``databus iceberg`` — then never wait
    for a commit, nor a commit for them.  In SQLite's default mode a reader waits while a
    commit holds the file, and gives up with "database is locked" after 5 s, which a slow
    fsync on a busy disk reaches."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            db.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:  # (locked, or a full disk: the commits say it again)
        log.warning("%s: the SQLite catalog stays in its journal mode (%s)", path, exc)


def local_path(url: str) -> str | None:
    if url.startswith("sqlite:///"):
        return os.path.abspath(url.removeprefix("sqlite:///"))  # (four slashes: absolute)
    if url.startswith("file://"):
        return urlparse(url).path
    if url and "://" not in url:
        return os.path.abspath(url)
    return None


def load_table(catalog, name: str):
    """The table, or None if the catalog has none of that name."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def create_table(catalog, name: str, value_fields: list[pa.Field], options: Options):
    """The table ``name`` with the Kafka columns, ``value_fields`` and the partition spec of
    ``partition.by`` (created in one catalog commit; if a peer created it first, theirs)."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    namespace = name.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    arrow = pa.schema(list(KAFKA_FIELDS) + value_fields)
    properties = {"write.target-file-size-bytes": str(options.target_file_size_bytes)}
    try:
        with catalog.create_table_transaction(name, schema=arrow,
                                              properties=properties) as tx:
            if options.partition_by:
                with tx.update_spec() as spec:
                    for transform in options.partition_by:
                        spec.add_field(transform.column, _transform(transform),
                                       _partition_name(transform))
    except TableAlreadyExistsError:
        pass
    except ValueError as exc:  # a transform on a column the table does not have, ...
        raise ValueError(f"iceberg: table {name}: partition.by: {exc}") from None
    return catalog.load_table(name)


def _transform(t: Transform):
    from pyiceberg import transforms

    simple = {"identity": transforms.IdentityTransform, "year": transforms.YearTransform,
              "month": transforms.MonthTransform, "day": transforms.DayTransform,
              "hour": transforms.HourTransform, "void": transforms.VoidTransform}
    if t.name in simple:
        return simple[t.name]()
    if t.name == "bucket":
        return transforms.BucketTransform(t.width)
    return transforms.TruncateTransform(t.width)


def _partition_name(t: Transform) -> str:
    if t.name == "identity":
        return t.column
    return f"{t.column}_{t.name}" + (f"_{t.width}" if t.width is not None else "")


def table_offsets(table) -> Offsets:
    """Where the sink resumes: per partition, the largest offset the retained snapshots'
    summaries record (options.resume_offsets)."""
    return resume_offsets(s.summary.additional_properties if s.summary else None
                          for s in table.snapshots())


def commit(table, batch: pa.Table, taken: Offsets, evolve: bool):
    """Append ``batch`` and record ``taken`` (next offsets) in one catalog commit; returns
    the refreshed table.  ``IncompatibleField`` if the batch's types do not fit the table."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(COMMIT_ATTEMPTS):
        if attempt:
            table.refresh()
        current = table.schema().as_arrow()
        try:  # ints that fit an int column stay int
            data = _in_table_schema(batch, current, evolve, narrow=True)
        except (pa.ArrowInvalid, OverflowError):
            data = _in_table_schema(batch, current, evolve, narrow=False)
        merged = data.schema
        changed = not schemas.same(merged, schemas.plain(current))
        offsets = merged_offsets(table_offsets(table), taken)
        tx = table.transaction()
        if changed:
            with tx.update_schema() as update:
                update.union_by_name(merged)
        tx.append(data, snapshot_properties={OFFSETS_PROPERTY: encode_offsets(offsets)})
        try:
            return tx.commit_transaction()
        except CommitFailedException as exc:
            if attempt == COMMIT_ATTEMPTS - 1:
                raise
            log.info("%s: the catalog refused the commit (%s); building it again on the "
                     "table's new snapshot", table.name(), exc)
            time.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")


def _in_table_schema(batch: pa.Table, current: pa.Schema, evolve: bool,
                     narrow: bool) -> pa.Table:
    """The batch in the table's schema-to-be (without ``evolve``, new fields are left out:
    only the table's own columns are written; a type change is refused all the same)."""
    merged, _changed = schemas.plan(current, batch.schema, narrow)
    if not evolve:
        merged = pa.schema([f for f in merged if f.name in set(current.names)])
    return schemas.conform(batch, merged)


def remove_orphans(table, min_age_ms: int, since_ms: float | None = None) -> list[str]:
    """Delete the files an unfinished commit left in a local warehouse (data files, manifests,
    metadata written before a kill or a failed commit, never committed); returns their paths.

    Only files written since ``since_ms`` (default: the current snapshot, less a minute) are
    candidates: an unfinished commit comes after the last finished one, and the check stays
    cheap (it reads only the manifests the snapshots since then added).  ``min_age_ms``
    spares files younger than that (another writer's commit in progress)."""
    location = local_path(table.location())
    if location is None or not os.path.isdir(location):
        return []
    metadata = table.metadata
    current = table.current_snapshot()
    if since_ms is not None:
        cutoff_ms = since_ms
    else:
        cutoff_ms = (current.timestamp_ms - 60_000) if current is not None else 0
    referenced = {table.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    recent = {}
    for snapshot in metadata.snapshots:
        referenced.add(snapshot.manifest_list)
        if snapshot.timestamp_ms >= cutoff_ms - 60_000:
            recent[snapshot.snapshot_id] = snapshot
    # Every data file a recent snapshot added (also one a later compaction replaced, which
    # older snapshots still read).
    for snapshot in recent.values():
        for manifest in snapshot.manifests(table.io):
            referenced.add(manifest.manifest_path)
            if manifest.added_snapshot_id in recent:
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    referenced.add(entry.data_file.file_path)
    referenced = {local_path(p) or p for p in referenced}
    now_ms = time.time() * 1000
    removed = []
    for sub in ("data", "metadata"):
        for folder, _dirs, names in os.walk(os.path.join(location, sub)):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    mtime_ms = os.stat(path).st_mtime * 1000
                except FileNotFoundError:
                    continue
                if mtime_ms < cutoff_ms or now_ms - mtime_ms < min_age_ms:
                    continue
                if path not in referenced:
                    os.remove(path)
                    removed.append(path)
    return removed
