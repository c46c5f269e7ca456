"""One index's SQLite database (WAL mode, stdlib ``sqlite3``, blocking: the sink calls it in a
worker thread).

Tables: ``entries`` (field id, value, timestamp, partition id, offset), appended in write
order, with the unique index ``by_value`` on all five in that order, so a point query with a
time range is one range scan of the index already ordered by time (and an entry indexed twice
violates it and fails loudly); ``fields`` and ``partitions`` name the ids (a partition row
also holds the next offset to index); ``batches`` records, per written batch, its
partition, offsets and the rowids its entries got, so that dropping the entries of records
the cluster's retention removed deletes rowid ranges instead of scanning the table;
``skipped`` counts missing / undecodable fields.

``add`` writes a batch's entries, its partition's next offset, its ``batches`` row and its
skip counts in one transaction: after a crash the database holds every batch it
acknowledged and nothing of the others, and the builder resumes from the offsets, so no
entry is ever missing or indexed twice.  ``trim`` drops, in one transaction, the entries
of a partition below its log start offset.

``rebuild`` empties the database and bumps its *generation* in one transaction; a builder
that finds another generation than the one it opened refuses to write (``Rebuilt``), and
the runtime starts it again, from offset 0 (it has no offsets any more).

``synchronous=NORMAL`` (in WAL mode): a transaction is durable once its commit record is in
the WAL file, which the kernel has, so it survives a crash of the process (kill -9); only a
crash of the machine may lose the last transactions, and their offsets go with them (the
same transaction), so the builder indexes those records again: never missing, never twice.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Mapping

from .fields import Entry

SCHEMA_VERSION = 2
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS fields (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS partitions (
    id INTEGER PRIMARY KEY, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next INTEGER, UNIQUE (topic, partition)
);
CREATE TABLE IF NOT EXISTS entries (
    field INTEGER NOT NULL, value TEXT NOT NULL, ts INTEGER NOT NULL,
    part INTEGER NOT NULL, "offset" INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS by_value ON entries (field, value, ts, part, "offset");
CREATE TABLE IF NOT EXISTS batches (
    part INTEGER NOT NULL, first INTEGER NOT NULL, next INTEGER NOT NULL,
    lo INTEGER NOT NULL, hi INTEGER NOT NULL, PRIMARY KEY (part, first)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS skipped (
    field TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (field, reason)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', 0);
PRAGMA user_version = {SCHEMA_VERSION};
"""

# Page cache of the builder's connection (KiB, negative as SQLite wants): inserts land all
# over the by_value index, whose pages should stay in memory rather than be re-read.
CACHE_KIB = 256 * 1024


class Rebuilt(RuntimeError):
    """``databus index rebuild`` emptied the database under a running builder."""


Location = tuple[int, str, int, int]  # (timestamp, topic, partition, offset)


class IndexStore:
    def __init__(self, path: str, *, readonly: bool = False) -> None:
        self.path = path
        self._fields: dict[str, int] = {}
        self._parts: dict[tuple[str, int], int] = {}
        if readonly:
            if not os.path.exists(path):
                raise FileNotFoundError(f"no index database at {path} (not built yet?)")
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                      check_same_thread=False)
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                self.db.close()
                raise FileNotFoundError(f"the index database at {path} has layout {version}, "
                                        f"not {SCHEMA_VERSION}: its builder rebuilds it")
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            # The sink's methods run in trio worker threads, one at a time.
            self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            self.db.execute("PRAGMA temp_store=MEMORY")
            # Checkpoint every ~40 MB of WAL rather than 4 MB: a page the build changes
            # again and again is copied back to the database less often.
            self.db.execute("PRAGMA wal_autocheckpoint=10000")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                self._drop_all()  # an older layout: built again from the beginning
            self.db.executescript(SCHEMA)

    def _drop_all(self) -> None:
        tables = [n for (n,) in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        self.db.execute("BEGIN IMMEDIATE")
        for table in tables:
            self.db.execute(f'DROP TABLE "{table}"')
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def offsets(self) -> dict[tuple[str, int], int]:
        return {(t, p): n for t, p, n in self.db.execute(
            "SELECT topic, partition, next FROM partitions WHERE next IS NOT NULL")}

    def generation(self) -> int:
        return self.db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]

    def check(self, generation: int) -> None:
        current = self.generation()
        if current != generation:
            raise Rebuilt(f"the index was rebuilt (generation {generation} -> {current}): "
                          "indexing again from the beginning")

    def rebuild(self) -> None:
        """Forget every entry, offset and count; a running builder starts over."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        for table in ("entries", "batches", "partitions", "fields", "skipped"):
            db.execute(f"DELETE FROM {table}")
        db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        db.execute("COMMIT")
        self._fields.clear()
        self._parts.clear()

    def field_id(self, name: str) -> int:
        """The id of field ``name`` (made on first use; call inside a write transaction)."""
        found = self._fields.get(name)
        if found is None:
            self.db.execute("INSERT OR IGNORE INTO fields (name) VALUES (?)", (name,))
            found = self._fields[name] = self.db.execute(
                "SELECT id FROM fields WHERE name = ?", (name,)).fetchone()[0]
        return found

    def part_id(self, tp: tuple[str, int]) -> int:
        found = self._parts.get(tp)
        if found is None:
            self.db.execute("INSERT OR IGNORE INTO partitions (topic, partition) VALUES (?, ?)",
                            tp)
            found = self._parts[tp] = self.db.execute(
                "SELECT id FROM partitions WHERE topic = ? AND partition = ?", tp).fetchone()[0]
        return found

    def add(self, tp: tuple[str, int], first: int, next_offset: int,
            entries: Mapping[str, Iterable[Entry]], skipped: Mapping[tuple[str, str], int],
            generation: int | None = None) -> None:
        """A batch of partition ``tp`` (offsets ``first`` to ``next_offset - 1``): its
        entries ``{field: [(value, timestamp, offset), ...]}``, its next offset and its skip
        counts, all or nothing (and nothing if the index is no longer at ``generation``)."""
        self.add_many([(tp, first, next_offset, entries, skipped)], generation)

    def add_many(self, batches: list[tuple], generation: int | None = None) -> None:
        """Several ``add`` batches in one transaction (fewer page writes: a page of the
        index that several batches change is written once)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            if generation is not None:
                self.check(generation)
            for tp, first, next_offset, entries, skipped in batches:
                self._add(tp, first, next_offset, entries, skipped)
        except BaseException:
            db.execute("ROLLBACK")
            self._fields.clear()  # ids made in the rolled back transaction are gone
            self._parts.clear()
            raise
        db.execute("COMMIT")

    def _add(self, tp, first, next_offset, entries, skipped) -> None:
        db = self.db
        part = self.part_id(tp)
        rows = []
        for name, group in entries.items():
            if group:
                field = self.field_id(name)
                rows += [(field, v, ts, part, off) for v, ts, off in group]
        rows.sort()  # in index order: each page of by_value is visited once per batch
        lo = (db.execute("SELECT max(rowid) FROM entries").fetchone()[0] or 0) + 1
        db.executemany('INSERT INTO entries (field, value, ts, part, "offset") '
                       "VALUES (?, ?, ?, ?, ?)", rows)
        if rows:
            db.execute("INSERT INTO batches (part, first, next, lo, hi) VALUES (?, ?, ?, ?, ?)",
                       (part, first, next_offset, lo, lo + len(rows) - 1))
        db.execute("UPDATE partitions SET next = ? WHERE id = ?", (next_offset, part))
        if skipped:
            db.executemany(
                "INSERT INTO skipped (field, reason, count) VALUES (?, ?, ?) "
                "ON CONFLICT (field, reason) DO UPDATE SET count = count + excluded.count",
                [(f, r, c) for (f, r), c in skipped.items()])

    def trim(self, starts: Mapping[tuple[str, int], int],
             generation: int | None = None) -> int:
        """Drop the entries below each partition's log start offset (the cluster's retention
        removed their records), in one transaction; the number of entries dropped."""
        db = self.db
        dropped = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            if generation is not None:
                self.check(generation)
            for (topic, partition), start in starts.items():
                row = db.execute("SELECT id FROM partitions WHERE topic = ? AND partition = ?",
                                 (topic, partition)).fetchone()
                if row is None:
                    continue
                part = row[0]
                batches = db.execute("SELECT first, next, lo, hi FROM batches "
                                     "WHERE part = ? AND first < ?", (part, start)).fetchall()
                for first, next_offset, lo, hi in batches:
                    # The rowid range finds the batch's entries; part and offset keep the
                    # delete to them even where a rowid came back into use.
                    dropped += db.execute(
                        'DELETE FROM entries WHERE rowid BETWEEN ? AND ? AND part = ? '
                        'AND "offset" < ?', (lo, hi, part, start)).rowcount
                    if next_offset <= start:
                        db.execute("DELETE FROM batches WHERE part = ? AND first = ?",
                                   (part, first))
                    else:
                        db.execute("UPDATE batches SET first = ? WHERE part = ? AND first = ?",
                                   (start, part, first))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return dropped

    def lookup(self, field: str, value: str, since: int | None = None, until: int | None = None,
               limit: int | None = None) -> list[Location]:
        """Entries of ``field = value`` with ``since <= timestamp < until``, newest first."""
        sql = ('SELECT e.ts, p.topic, p.partition, e."offset" FROM entries e '
               "JOIN partitions p ON p.id = e.part "
               "WHERE e.field = (SELECT id FROM fields WHERE name = ?) AND e.value = ?")
        args: list = [field, value]
        if since is not None:
            sql += " AND e.ts >= ?"
            args.append(since)
        if until is not None:
            sql += " AND e.ts < ?"
            args.append(until)
        sql += ' ORDER BY e.ts DESC, p.topic DESC, p.partition DESC, e."offset" DESC'
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return list(self.db.execute(sql, args))

    def entry_count(self) -> int:
        return self.db.execute("SELECT count(*) FROM entries").fetchone()[0]

    def skipped(self) -> dict[tuple[str, str], int]:
        return {(f, r): c for f, r, c in self.db.execute("SELECT field, reason, count FROM skipped")}

    def size_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal")
                   if os.path.exists(p))
