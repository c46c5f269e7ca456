"""One index's SQLite database (WAL mode, stdlib ``sqlite3``, blocking: the sink calls it in a
worker thread), kept log-structured so that writing stays cheap as the index grows.

An entry is (field id, value, timestamp, partition id, offset), the key of every table that
holds entries (``WITHOUT ROWID``: the table *is* its key's B-tree, sorted as a point query
with a time range reads it).  New entries go into ``recent``, which stays small (about
``recent_max`` entries, its pages in the cache), so inserting into it touches few pages.
When a commit leaves it with ``recent_max`` or more, it becomes a *run* of level 0 as it is
(renamed ``run_N``: nothing copied) and a new empty ``recent`` takes its place, in one
transaction; when ``fanin`` runs of one level exist they are merged (SQLite merges the
sorted tables, ``UNION ALL ... ORDER BY``) into one run of the next level (a table written
by appending: every page written once, full): a tiered log-structured merge, each entry
copied about ``log_fanin(entries / recent_max) - 1`` times.  Inserting straight into one
big sorted table instead touches a page per entry once the index outgrows the cache, and
every touched page is written again: that is what made the build slow down as the index
grew.

The view ``entries`` is ``recent`` and every run (rebuilt with the runs, in the same
transaction); a query is one statement on it (one read transaction: it sees a run set as
committed), each table answering with one range scan of its key.  ``runs`` lists the runs
(level, entry count); ``spans`` holds, per run (0: ``recent``) and partition, the lowest
and highest offset of its entries, so that dropping the entries of records the cluster's
retention removed touches only the runs holding some (a run wholly below the log start is
dropped as a table).  ``fields`` and ``partitions`` name the ids (a partition row also holds
the next offset to index); ``skipped`` counts missing / undecodable fields.

``add`` writes a batch's entries, its partition's next offset and its skip counts in one
transaction: after a crash the database holds every batch it acknowledged and nothing of
the others, and the builder resumes from the offsets, so no entry is ever missing or
indexed twice.  A batch that starts before its partition's next offset is refused
(``IndexedTwice``).  Sealing ``recent`` as a run is one transaction too.  A merge fills
its new run over several transactions (``MERGE_CHUNK`` entries each: the builder's
commits go in between; with ``background_merges`` in a thread and connection of its own)
but the run is in no query (level -1) until the last one, which also drops the sources: a
crash in the middle leaves the sources as they were, and the unfinished run is dropped on
the next open.  ``trim`` drops, in one transaction, the entries of a partition below its
log start offset (after a merge under way).

``rebuild`` empties the database and bumps its *generation* in one transaction; a builder
that finds another generation than the one it opened refuses to write (``Rebuilt``), and
the runtime starts it again, from offset 0 (it has no offsets any more).

``synchronous=NORMAL`` (in WAL mode): a transaction is durable once its commit record is in
the WAL file, which the kernel has, so it survives a crash of the process (kill -9); only a
crash of the machine may lose the last transactions, and their offsets go with them (the
same transaction), so the builder indexes those records again: never missing, never twice.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from .fields import Entry

SCHEMA_VERSION = 3
COLUMNS = 'field, value, ts, part, "offset"'
ENTRY_TABLE = ('(field INTEGER NOT NULL, value TEXT NOT NULL, ts INTEGER NOT NULL, '
               'part INTEGER NOT NULL, "offset" INTEGER NOT NULL, '
               'PRIMARY KEY (field, value, ts, part, "offset")) WITHOUT ROWID')
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS fields (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS partitions (
    id INTEGER PRIMARY KEY, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next INTEGER, UNIQUE (topic, partition)
);
CREATE TABLE IF NOT EXISTS recent {ENTRY_TABLE};
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, level INTEGER NOT NULL, entries INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS spans (
    run INTEGER NOT NULL, part INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,
    PRIMARY KEY (run, part)
) WITHOUT ROWID;
CREATE VIEW IF NOT EXISTS entries AS SELECT {COLUMNS} FROM recent;
CREATE TABLE IF NOT EXISTS skipped (
    field TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (field, reason)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', 0);
PRAGMA user_version = {SCHEMA_VERSION};
"""

# Page cache of the builder's connection (KiB, negative as SQLite wants): ``recent``, the
# table inserted into, should stay in memory (1M entries of short values: ~50 MB).
CACHE_KIB = 256 * 1024
RECENT_MAX = 1_000_000  # entries in ``recent`` before they move to a run
FANIN = 8  # runs of one level merged into one of the next
# Entries per INSERT statement: the powers of two up to this (SQLite's limit is 32766
# parameters, 3 an entry).  Every statement releases Python's GIL while SQLite runs it and
# takes it back after, and taking it back can wait for another thread's switch interval
# (5 ms): a batch of 5,000 entries goes in ~5 statements, not one per few hundred.
ROWS_PER_INSERT = 2048
# Entries a merge copies per transaction: the builder's commits wait at most for one
# (~0.1 s); a merge is committed, its sources dropped, only once it has copied them all.
MERGE_CHUNK = 200_000
# Before every entry (field ids start at 1): where a merge starts.
BEFORE_ALL = (-1, "", 0, 0, 0)


class IndexedTwice(sqlite3.IntegrityError):
    """A batch starting before its partition's next offset: its records are indexed."""


class Rebuilt(RuntimeError):
    """``databus index rebuild`` emptied the database under a running builder."""


Location = tuple[int, str, int, int]  # (timestamp, topic, partition, offset)


class IndexStore:
    def __init__(self, path: str, *, readonly: bool = False, recent_max: int = RECENT_MAX,
                 fanin: int = FANIN, background_merges: bool = False) -> None:
        self.path = path
        self.recent_max = recent_max
        self.fanin = max(2, fanin)
        self.background_merges = background_merges
        # One write transaction at a time among this object's connections (the builder's
        # and the merger's), taken before SQLite's own lock so that neither meets it busy.
        self._lock = threading.Lock()
        # Held for a whole merge: a trim or a rebuild waits for the merge under way (it
        # reads its sources in several transactions).
        self._merge_lock = threading.Lock()
        self._merges = threading.Condition()
        self._asked = self._passed = 0  # merge passes asked for, done (background)
        self._merger: threading.Thread | None = None
        self._closing = False
        self._merge_failed: BaseException | None = None
        self._fields: dict[str, int] = {}
        self._parts: dict[tuple[str, int], int] = {}
        self._recent: int | None = None  # entries in ``recent`` (counted once, then kept)
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
            self.db = self._connect(CACHE_KIB)
            self.db.execute("PRAGMA journal_mode=WAL")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                self._drop_all()  # an older layout: built again from the beginning
            self.db.executescript(SCHEMA)
            self._drop_unfinished()

    def _connect(self, cache_kib: int) -> sqlite3.Connection:
        """A connection to write with (autocommit: transactions are explicit)."""
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA cache_size=-{cache_kib}")
        db.execute("PRAGMA temp_store=MEMORY")
        # Checkpoint every ~40 MB of WAL rather than 4 MB: a page of ``recent`` changed
        # again and again is copied back to the database less often.
        db.execute("PRAGMA wal_autocheckpoint=10000")
        # Cut the WAL back to 64 MB after a checkpoint that let it grow larger.
        db.execute(f"PRAGMA journal_size_limit={64 << 20}")
        return db

    @contextmanager
    def _transaction(self, db: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction on ``db`` (the builder's connection by default): committed,
        or rolled back on any error."""
        db = self.db if db is None else db
        with self._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _drop_unfinished(self) -> None:
        """Drop the run of a merge a crash (or close) interrupted: the merge starts over,
        from its sources, which it had not touched."""
        with self._transaction() as db:
            for (run,) in db.execute("SELECT id FROM runs WHERE level < 0").fetchall():
                self._drop_run(db, run)

    @staticmethod
    def _drop_run(db: sqlite3.Connection, run: int) -> None:
        """Drop run ``run``: its table and rows (inside a write transaction)."""
        db.execute(f"DROP TABLE IF EXISTS run_{run}")
        db.execute("DELETE FROM runs WHERE id = ?", (run,))
        db.execute("DELETE FROM spans WHERE run = ?", (run,))

    def _drop_all(self) -> None:
        found = list(self.db.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%'"))
        self.db.execute("BEGIN IMMEDIATE")
        for kind, name in found:
            self.db.execute(f'DROP {kind.upper()} "{name}"')
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close the database; a merge under way stops (it starts over on the next open)."""
        if self._merger is not None:
            with self._merges:
                self._closing = True
                self._merges.notify_all()
            self._merger.join()
            self._merger = None
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
        with self._merge_lock, self._transaction() as db:
            for (run,) in db.execute("SELECT id FROM runs").fetchall():
                db.execute(f"DROP TABLE IF EXISTS run_{run}")
            for table in ("recent", "runs", "spans", "partitions", "fields", "skipped"):
                db.execute(f"DELETE FROM {table}")
            self._set_view()
            db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        self._forget()

    def _forget(self) -> None:
        """Drop what this object remembers of the database (after a rollback, a rebuild)."""
        self._fields.clear()
        self._parts.clear()
        self._recent = None

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

    # -- writing --------------------------------------------------------------------------

    def add(self, tp: tuple[str, int], first: int, next_offset: int,
            entries: Mapping[str, Iterable[Entry]], skipped: Mapping[tuple[str, str], int],
            generation: int | None = None) -> None:
        """A batch of partition ``tp`` (offsets ``first`` to ``next_offset - 1``): its
        entries ``{field: [(value, timestamp, offset), ...]}``, its next offset and its skip
        counts, all or nothing (and nothing if the index is no longer at ``generation``)."""
        self.add_many([(tp, first, next_offset, entries, skipped)], generation)

    def add_many(self, batches: list[tuple], generation: int | None = None) -> None:
        """Several ``add`` batches in one transaction; then, if ``recent`` is full, its
        entries move to a run (and runs merge), each move a transaction of its own."""
        if self._recent is None:
            self._recent = self.db.execute("SELECT count(*) FROM recent").fetchone()[0]
        try:
            with self._transaction():
                if generation is not None:
                    self.check(generation)
                if self._merge_failed is not None:  # (after the check: a rebuild says so)
                    raise self._merge_failed
                added = sum(self._add(*batch) for batch in batches)
        except BaseException:
            self._forget()  # ids made in the rolled back transaction are gone
            raise
        self._recent += added
        if self._recent >= self.recent_max:
            self.compact()

    @staticmethod
    @functools.cache
    def _insert_sql(rows: int) -> str:
        # ?1 the field, ?2 the partition, then (value, timestamp, offset) per entry: three
        # parameters an entry.  (A few sizes only: SQLite keeps them prepared.)
        values = ",".join(f"(?1,?{3 + 3 * i},?{4 + 3 * i},?2,?{5 + 3 * i})"
                          for i in range(rows))
        return f"INSERT INTO recent ({COLUMNS}) VALUES {values}"

    def _add(self, tp, first, next_offset, entries, skipped) -> int:
        db = self.db
        part = self.part_id(tp)
        stored = db.execute("SELECT next FROM partitions WHERE id = ?", (part,)).fetchone()[0]
        if stored is not None and first < stored:
            raise IndexedTwice(f"{tp[0]}-{tp[1]}: a batch from offset {first}, but the index "
                               f"has every record before {stored}")
        added = 0
        step = ROWS_PER_INSERT
        for name, group in entries.items():
            if not group:
                continue
            field = self.field_id(name)
            flat = [x for entry in sorted(group) for x in entry]
            at, left = 0, len(group)
            while left:
                rows = min(step, 1 << (left.bit_length() - 1))  # the largest power of 2
                db.execute(self._insert_sql(rows), [field, part, *flat[at:at + rows * 3]])
                at += rows * 3
                left -= rows
            added += len(group)
        if added:
            db.execute("INSERT INTO spans (run, part, lo, hi) VALUES (0, ?, ?, ?) "
                       "ON CONFLICT (run, part) DO UPDATE SET lo = min(lo, excluded.lo), "
                       "hi = max(hi, excluded.hi)", (part, first, next_offset - 1))
        db.execute("UPDATE partitions SET next = ? WHERE id = ?", (next_offset, part))
        if skipped:
            db.executemany(
                "INSERT INTO skipped (field, reason, count) VALUES (?, ?, ?) "
                "ON CONFLICT (field, reason) DO UPDATE SET count = count + excluded.count",
                [(f, r, c) for (f, r), c in skipped.items()])
        return added

    def compact(self) -> None:
        """Make ``recent`` a run, then merge every level that has ``fanin`` runs into one
        run of the next level: here, or by the merger thread (``background_merges``) while
        the builder goes on."""
        self._seal_recent()
        self._recent = 0
        if not self.background_merges:
            self._merge_levels(self.db)
            return
        with self._merges:
            if self._merger is None:
                self._merger = threading.Thread(target=self._run_merger, daemon=True,
                                                name=f"index-merge-{os.path.basename(self.path)}")
                self._merger.start()
            self._asked += 1
            self._merges.notify_all()

    def wait_merges(self) -> None:
        """Until the merges asked for so far are done (background merges)."""
        with self._merges:
            self._merges.wait_for(lambda: self._passed >= self._asked or self._merger is None
                                  or self._merge_failed is not None)
        if self._merge_failed is not None:
            raise self._merge_failed

    def _run_merger(self) -> None:
        db = self._connect(CACHE_KIB // 4)
        try:
            while True:
                with self._merges:
                    self._merges.wait_for(lambda: self._asked > self._passed or self._closing)
                    if self._closing:
                        return
                    asked = self._asked
                self._merge_levels(db)
                with self._merges:
                    self._passed = asked
                    self._merges.notify_all()
        except BaseException as exc:  # raised to the builder by its next commit
            with self._merges:
                self._merge_failed = exc
                self._merges.notify_all()
        finally:
            db.close()

    def _merge_levels(self, db: sqlite3.Connection) -> None:
        while not self._closing:
            levels: dict[int, list[int]] = {}
            for run, level in db.execute("SELECT id, level FROM runs WHERE level >= 0 "
                                         "ORDER BY id"):
                levels.setdefault(level, []).append(run)
            full = sorted(level for level, runs in levels.items() if len(runs) >= self.fanin)
            if not full:
                return
            with self._merge_lock:
                self._merge(db, levels[full[0]][:self.fanin], full[0] + 1)

    def _seal_recent(self) -> None:
        """One transaction: ``recent`` becomes a run of level 0 as it is (renamed: no entry
        copied; its pages are as the inserts left them, the merges write them compact) and
        a new empty ``recent`` takes its place."""
        with self._transaction() as db:
            entries = db.execute("SELECT count(*) FROM recent").fetchone()[0]
            if entries:  # (``recent`` emptied by retention: nothing to seal)
                run = db.execute("INSERT INTO runs (level, entries) VALUES (0, ?)",
                                 (entries,)).lastrowid
                db.execute("DROP VIEW entries")  # (made again below, naming the run)
                db.execute(f"ALTER TABLE recent RENAME TO run_{run}")
                db.execute(f"CREATE TABLE recent {ENTRY_TABLE}")
                db.execute("UPDATE spans SET run = ? WHERE run = 0", (run,))
                self._set_view()

    def _merge(self, db: sqlite3.Connection, sources: list[int], level: int) -> None:
        """A new run of ``level`` holding the entries of the runs ``sources``, which are
        dropped.  The new run (level -1 until done: in no query, never merged) is filled
        ``MERGE_CHUNK`` entries per transaction, each taking the next entries in key order
        (SQLite merges the sorted tables: no sort); the last transaction gives it its level
        and drops the sources.  A crash (or a close) before leaves the sources as they were
        and the unfinished run is dropped on the next open."""
        with self._transaction(db):
            run = db.execute("INSERT INTO runs (level, entries) VALUES (-1, 0)").lastrowid
            db.execute(f"CREATE TABLE run_{run} {ENTRY_TABLE}")
        select = " UNION ALL ".join(
            f"SELECT {COLUMNS} FROM run_{source} WHERE ({COLUMNS}) > (?1, ?2, ?3, ?4, ?5)"
            for source in sources) + f" ORDER BY 1, 2, 3, 4, 5 LIMIT {MERGE_CHUNK}"
        last = BEFORE_ALL
        entries = 0
        while True:
            if self._closing:
                with self._transaction(db):
                    self._drop_run(db, run)
                return
            with self._transaction(db):
                copied = db.execute(f"INSERT INTO run_{run} ({COLUMNS}) {select}", last).rowcount
                entries += copied
                if copied == MERGE_CHUNK:
                    last = db.execute(f"SELECT {COLUMNS} FROM run_{run} ORDER BY 1 DESC, "
                                      "2 DESC, 3 DESC, 4 DESC, 5 DESC LIMIT 1").fetchone()
                    continue
                marks = ",".join("?" * len(sources))
                db.execute(f"INSERT INTO spans (run, part, lo, hi) SELECT ?, part, min(lo), "
                           f"max(hi) FROM spans WHERE run IN ({marks}) GROUP BY part",
                           (run, *sources))
                for source in sources:
                    self._drop_run(db, source)
                if entries:
                    db.execute("UPDATE runs SET level = ?, entries = ? WHERE id = ?",
                               (level, entries, run))
                else:  # nothing to merge (retention emptied the runs): no empty run
                    self._drop_run(db, run)
                self._set_view(db)
                return

    def _set_view(self, db: sqlite3.Connection | None = None) -> None:
        """``entries``: ``recent`` and every finished run (call inside the transaction
        changing them)."""
        db = self.db if db is None else db
        runs = [run for (run,) in db.execute("SELECT id FROM runs WHERE level >= 0 ORDER BY id")]
        select = " UNION ALL ".join(f"SELECT {COLUMNS} FROM {table}"
                                    for table in ["recent", *(f"run_{r}" for r in runs)])
        db.execute("DROP VIEW IF EXISTS entries")
        db.execute(f"CREATE VIEW entries AS {select}")

    def trim(self, starts: Mapping[tuple[str, int], int],
             generation: int | None = None) -> int:
        """Drop the entries below each partition's log start offset (the cluster's retention
        removed their records), in one transaction; the number of entries dropped."""
        dropped = 0
        try:
            # (after a merge under way: it reads its sources in several transactions)
            with self._merge_lock, self._transaction() as db:
                if generation is not None:
                    self.check(generation)
                start_of = {}
                for (topic, partition), start in starts.items():
                    row = db.execute("SELECT id FROM partitions WHERE topic = ? AND partition = ?",
                                     (topic, partition)).fetchone()
                    if row is not None:
                        start_of[row[0]] = start
                touched = sorted({run for run, part, lo, _hi in db.execute(
                    "SELECT run, part, lo, hi FROM spans") if lo < start_of.get(part, -1)})
                runs_changed = False
                for run in touched:
                    table = f"run_{run}" if run else "recent"
                    spans = db.execute("SELECT part, lo, hi FROM spans WHERE run = ?",
                                       (run,)).fetchall()
                    if run and all(hi < start_of.get(part, -1) for part, _lo, hi in spans):
                        # Every entry of the run is below its partition's start: drop the table.
                        dropped += db.execute("SELECT entries FROM runs WHERE id = ?",
                                              (run,)).fetchone()[0]
                        self._drop_run(db, run)
                        runs_changed = True
                        continue
                    gone = 0
                    for part, lo, hi in spans:
                        start = start_of.get(part, -1)
                        if lo >= start:
                            continue
                        gone += db.execute(f'DELETE FROM {table} WHERE part = ? AND "offset" < ?',
                                           (part, start)).rowcount
                        if hi < start:
                            db.execute("DELETE FROM spans WHERE run = ? AND part = ?", (run, part))
                        else:
                            db.execute("UPDATE spans SET lo = ? WHERE run = ? AND part = ?",
                                       (start, run, part))
                    if run:
                        db.execute("UPDATE runs SET entries = entries - ? WHERE id = ?", (gone, run))
                    elif self._recent is not None:
                        self._recent -= gone
                    dropped += gone
                if runs_changed:
                    self._set_view()
        except BaseException:
            self._recent = None
            raise
        return dropped

    # -- reading --------------------------------------------------------------------------

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
        return (self.db.execute("SELECT count(*) FROM recent").fetchone()[0]
                + self.db.execute("SELECT coalesce(sum(entries), 0) FROM runs").fetchone()[0])

    def skipped(self) -> dict[tuple[str, str], int]:
        return {(f, r): c for f, r, c in self.db.execute("SELECT field, reason, count FROM skipped")}

    def size_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal")
                   if os.path.exists(p))
