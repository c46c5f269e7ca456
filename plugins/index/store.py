"""One index's SQLite database (WAL mode, stdlib ``sqlite3``, blocking: the sink calls it in a
worker thread).

Tables: ``entries`` (field, value, timestamp, topic, partition, offset), keyed by all six in
that order without a rowid, so a point query with a time range is one range scan already
ordered by time; ``offsets`` (the next offset to index, per partition) and ``skipped``
(missing / undecodable fields).  ``add`` writes a batch's entries, its partition's next
offset and its skip counts in one transaction: after a crash the database holds every batch
it acknowledged and nothing of the others, and the builder resumes from ``offsets``, so no
entry is ever missing or indexed twice (a duplicate would violate the key and fail loudly).

``rebuild`` empties the database and bumps its *generation* in one transaction; a builder
that finds another generation than the one it opened refuses to write (``Rebuilt``), and
the runtime starts it again, from offset 0 (it has no offsets any more).

``synchronous=NORMAL``: a committed transaction survives a crash of the process (kill -9)
but may be lost by a crash of the machine; the builder then indexes those records again
from its offsets, which went with them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Mapping

from .fields import Entry

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    field TEXT NOT NULL, value TEXT NOT NULL, ts INTEGER NOT NULL,
    topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    PRIMARY KEY (field, value, ts, topic, partition, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, next INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS skipped (
    field TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (field, reason)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', 0);
"""


class Rebuilt(RuntimeError):
    """``databus index rebuild`` emptied the database under a running builder."""

Location = tuple[int, str, int, int]  # (timestamp, topic, partition, offset)


class IndexStore:
    def __init__(self, path: str, *, readonly: bool = False) -> None:
        self.path = path
        if readonly:
            if not os.path.exists(path):
                raise FileNotFoundError(f"no index database at {path} (not built yet?)")
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                      check_same_thread=False)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            # The sink's methods run in trio worker threads, one at a time.
            self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def offsets(self) -> dict[tuple[str, int], int]:
        return {(t, p): n for t, p, n in self.db.execute("SELECT topic, partition, next FROM offsets")}

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
        for table in ("entries", "offsets", "skipped"):
            db.execute(f"DELETE FROM {table}")
        db.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        db.execute("COMMIT")

    def add(self, entries: Iterable[Entry], offsets: Mapping[tuple[str, int], int],
            skipped: Mapping[tuple[str, str], int], generation: int | None = None) -> None:
        """Entries, next offsets and skip counts: all or nothing (and nothing if the index
        is no longer at ``generation``)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            if generation is not None:
                self.check(generation)
            db.executemany(
                'INSERT INTO entries (field, value, ts, topic, partition, "offset") '
                "VALUES (?, ?, ?, ?, ?, ?)", entries)
            db.executemany(
                "INSERT INTO offsets (topic, partition, next) VALUES (?, ?, ?) "
                "ON CONFLICT (topic, partition) DO UPDATE SET next = excluded.next",
                [(t, p, n) for (t, p), n in offsets.items()])
            db.executemany(
                "INSERT INTO skipped (field, reason, count) VALUES (?, ?, ?) "
                "ON CONFLICT (field, reason) DO UPDATE SET count = count + excluded.count",
                [(f, r, c) for (f, r), c in skipped.items()])
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def lookup(self, field: str, value: str, since: int | None = None, until: int | None = None,
               limit: int | None = None) -> list[Location]:
        """Entries of ``field = value`` with ``since <= timestamp < until``, newest first."""
        sql = 'SELECT ts, topic, partition, "offset" FROM entries WHERE field = ? AND value = ?'
        args: list = [field, value]
        if since is not None:
            sql += " AND ts >= ?"
            args.append(since)
        if until is not None:
            sql += " AND ts < ?"
            args.append(until)
        sql += ' ORDER BY ts DESC, topic DESC, partition DESC, "offset" DESC'
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
