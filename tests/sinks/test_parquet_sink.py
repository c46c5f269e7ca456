"""The parquet sink object without the runtime or trio: batches in, files out (real files in
tmp_path), and replays after a crash, whatever the cut points, leaving every record in
exactly one file."""

from __future__ import annotations

import itertools
import json
import random

import pyarrow.parquet as pq
from databus_plugins.parquet import layout
from databus_plugins.parquet.sink import ParquetSink

from databus.client import ConsumerRecord

from .harness import export_files, read_export

HOUR = 3_600_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR  # the start of an hour


def records(first, count, partition=0, ts=lambda i: T0):
    return [ConsumerRecord("t", partition, i, ts(i), 0, b"k", json.dumps({"id": i}).encode(), ())
            for i in range(first, first + count)]


def sink(path, **config):
    return ParquetSink(layout.parse_options({"path": str(path), **config}))


def feed(s, tp, recs, rng, force_every=None):
    """Hand ``recs`` over in random batch sizes, as polls do; optionally force a flush now
    and then (what a wall-clock roll or a revocation does at an unpredictable point)."""
    pos = 0
    while pos < len(recs):
        n = rng.randint(1, 700)
        s._write(tp, recs[pos:pos + n])
        pos += n
        if force_every and rng.random() < force_every:
            s._flush([tp], True)
    return s._flush([tp], False)


def test_files_are_cut_at_flush_size_whatever_the_batches(tmp_path):
    s = sink(tmp_path, **{"flush.size": 1000, "partition.by": "none"})
    tp = ("t", 0)
    s._open(tp, None)
    assert feed(s, tp, records(0, 3500), random.Random(1)) == {tp: 3000}
    names = [p.name for p in export_files(tmp_path)]
    assert names == [layout.file_name("t", 0, a, a + 999) for a in (0, 1000, 2000)]
    assert s._flush([tp], True) == {tp: 3500}  # a forced flush writes the rest
    assert export_files(tmp_path)[-1].name == layout.file_name("t", 0, 3000, 3499)


def test_a_replay_after_a_crash_leaves_each_record_in_exactly_one_file(tmp_path):
    tp = ("t", 0)
    recs = records(0, 5000)
    first = sink(tmp_path, **{"flush.size": 800, "partition.by": "none"})
    first._open(tp, None)
    # Forced flushes at random points: cuts a replay will not repeat.
    feed(first, tp, recs, random.Random(2), force_every=0.3)
    first._flush([tp], True)
    # The crash: the group's last commit was the end of the third file (commits fall on
    # file ends), and a temporary file was left behind.
    committed = layout.parse_file_name(export_files(tmp_path)[2].name)[3] + 1
    stray = export_files(tmp_path)[0].parent / layout.temp_name("t+0+x.parquet", "dead")
    stray.write_bytes(b"half a file")
    second = sink(tmp_path, **{"flush.size": 800, "partition.by": "none"})
    second._open(tp, committed)
    assert not stray.exists()
    feed(second, tp, recs[committed:], random.Random(3))
    assert second._flush([tp], True) == {tp: 5000}
    table = read_export(tmp_path)
    assert sorted(table.column("id").to_pylist()) == list(range(5000))
    # and the files tile the offsets: no overlap, no gap
    spans = sorted(layout.parse_file_name(p.name)[2:] for p in export_files(tmp_path))
    assert spans[0][0] == 0 and spans[-1][1] == 4999
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))


def test_a_deterministic_replay_rewrites_the_same_names(tmp_path):
    tp = ("t", 0)
    recs = records(0, 3000)
    first = sink(tmp_path, **{"flush.size": 500, "partition.by": "none"})
    first._open(tp, None)
    feed(first, tp, recs, random.Random(4))
    before = [p.name for p in export_files(tmp_path)]
    second = sink(tmp_path, **{"flush.size": 500, "partition.by": "none"})
    second._open(tp, 1000)  # committed 1000, files up to 2999 were written after it
    feed(second, tp, recs[1000:], random.Random(5))
    assert [p.name for p in export_files(tmp_path)] == before


def test_hive_directories_by_record_hour_roll_together(tmp_path):
    tp = ("t", 2)
    s = sink(tmp_path, **{"flush.size": 600})
    s._open(tp, None)
    # three hours, records interleaved across two of them near each boundary
    recs = records(0, 1200, partition=2,
                   ts=lambda i: T0 + (i // 400) * HOUR + (HOUR - 1 if i % 7 == 0 else 0))
    feed(s, tp, recs, random.Random(6))
    s._flush([tp], True)
    by_dir = {}
    for path in export_files(tmp_path):
        by_dir.setdefault(path.parent.relative_to(tmp_path).as_posix(), []).append(path)
        rows = pq.read_table(path)
        hours = {t // HOUR for t in rows.column("timestamp").cast("int64").to_pylist()}
        assert len(hours) == 1
        date, hour = path.parent.parent.name, path.parent.name
        assert (date, hour) == tuple(layout.hive_dir("t", hours.pop(), "hour").split("/")[1:])
    assert len(by_dir) >= 3
    table = read_export(tmp_path)
    assert sorted(table.column("offset").to_pylist()) == list(range(1200))
    # rolled as a group: the files of one roll cover one offset range between them
    ranges = sorted(layout.parse_file_name(p.name)[2:] for ps in by_dir.values() for p in ps)
    assert max(last for _, last in ranges if last < 600) == 599


def _both_ways(recs, batch_size, config, tmp_path):
    """The same records through write (ConsumerRecords) and write_columns (the consumer's
    RecordColumns, decoded from record batches): their files and rejections."""
    from databus.client.fetcher import decode_fetched, decode_fetched_columns
    from databus.protocol.records import build_batch

    out = []
    for way in ("records", "columns"):
        s = sink(tmp_path / way, **config)
        s._open(("t", 0), None)
        rejected = []
        for start in range(0, len(recs), batch_size):
            chunk = recs[start:start + batch_size]
            data = build_batch([(r.key, r.value, r.headers, r.timestamp, r.offset)
                                for r in chunk], base_offset=chunk[0].offset)
            if way == "records":
                got, _ = decode_fetched("t", 0, data, chunk[0].offset)
                rejected += [(r.offset, why) for r, why in s._write(("t", 0), got) or ()]
            else:
                got, _ = decode_fetched_columns("t", 0, data, chunk[0].offset)
                rejected += [(got.offsets[i], why)
                             for i, why in s._write_columns(("t", 0), got) or ()]
        s._flush([("t", 0)], True)
        files = sorted(p.relative_to(tmp_path / way) for p in (tmp_path / way).rglob("*.parquet"))
        tables = [pq.read_table(tmp_path / way / f) for f in files]
        out.append((files, tables, rejected))
    return out


def test_columnar_batches_give_the_files_of_record_batches(tmp_path):
    rng = random.Random(7)
    recs = []
    for i in range(3000):
        value = json.dumps({"id": i, "name": f"n{i % 7}", "amount": i / 4}).encode()
        if i % 97 == 5:
            value = None  # a tombstone: a row of nulls
        recs.append(ConsumerRecord("t", 0, i * 2, T0 + i * 5000, 0,
                                   None if i % 3 else b"k%d" % i, value,
                                   (("h", b"x"), ("n", None)) if i % 5 == 0 else ()))
    (files_r, tables_r, rej_r), (files_c, tables_c, rej_c) = _both_ways(
        recs, rng.randint(300, 900), {"flush.size": 1000}, tmp_path)
    assert files_r == files_c and len(files_r) > 3
    assert tables_r == tables_c
    assert rej_r == rej_c == []


def test_a_columnar_batch_with_a_bad_value_rejects_that_row_only(tmp_path):
    recs = [ConsumerRecord("t", 0, i, T0, 0, None,
                           b"{not json" if i == 13 else json.dumps({"id": i}).encode(), ())
            for i in range(40)]
    (files_r, tables_r, rej_r), (files_c, tables_c, rej_c) = _both_ways(recs, 40, {}, tmp_path)
    assert [offset for offset, _ in rej_c] == [13]
    assert rej_r == rej_c and tables_r == tables_c
    assert sum(t.num_rows for t in tables_c) == 39
