"""The index plugin's pure parts: where a field is in a record and the text stored for it,
the SQLite store's transaction and order, and the `indexes:` configuration (no trio, no
broker)."""

from __future__ import annotations

import json
import sqlite3

import msgpack
import pytest
from databus_plugins.index import store as store_module
from databus_plugins.index.fields import (
    MISSING,
    UNDECODABLE,
    Extractor,
    decode_json,
    parse_source,
)
from databus_plugins.index.store import ENTRY_TABLE, IndexStore, Rebuilt

from databus.config import ConfigError, parse_config


def record(offset, value, key=b"k", headers=(), ts=1000, partition=0):
    return ("t", partition, offset, ts, 0, key, value, tuple(headers))


FIELDS = {"user": "value.user.id", "kind": "kind", "log": "header.log-id", "key": "key"}


def test_fields_from_a_json_path_a_header_and_the_key_as_text():
    ex = Extractor(FIELDS)
    value = json.dumps({"user": {"id": 42}, "kind": "buy"}).encode()
    entries, skipped = ex.entries([record(7, value, b"abc", [("log-id", b"L1")], ts=5)])
    assert entries == {"user": [("42", 5, 7)], "kind": [("buy", 5, 7)], "log": [("L1", 5, 7)],
                       "key": [("abc", 5, 7)]}
    assert skipped == {}


@pytest.mark.parametrize("raw, text", [
    (True, "true"), (False, "false"), (3, "3"), (2.5, "2.5"), ("x y", "x y"), (-1, "-1"),
])
def test_scalars_are_stored_as_text(raw, text):
    entries, _ = Extractor({"f": "f"}).entries([record(0, json.dumps({"f": raw}).encode())])
    assert entries == {"f": [(text, 1000, 0)]}


def test_missing_and_undecodable_fields_are_counted_and_the_others_kept():
    ex = Extractor(FIELDS)
    records = [
        record(0, b"{broken", None, [("log-id", b"L")]),        # value not JSON, no key
        record(1, json.dumps({"user": {"id": [1]}, "kind": None}).encode(),
               headers=[("log-id", b"\xff\xfe")]),               # a list; null; bad UTF-8
        record(2, None),                                          # a tombstone
        record(3, json.dumps({"user": "flat"}).encode()),         # a path through a string
    ]
    entries, skipped = ex.entries(records)
    assert sorted((f, e[2]) for f, group in entries.items() for e in group) == [
        ("key", 1), ("key", 2), ("key", 3), ("log", 0)]
    assert skipped == {
        ("user", UNDECODABLE): 3, ("kind", UNDECODABLE): 1, ("key", MISSING): 1,
        ("kind", MISSING): 3, ("log", UNDECODABLE): 1, ("log", MISSING): 2,
        ("user", MISSING): 1,
    }


@pytest.mark.parametrize("raw", [
    b'{"a": 1}', b' {"a": 1}\n', b'\xef\xbb\xbf{"a": 1}', '{"a": "\u00e9"}'.encode("utf-16"),
    b'{"a": NaN}', b"[1, 2]", b'"s"', b"{", b'{"a": 1} x', b"\xff", b"", b'{"a": 1}{}',
])
def test_decode_json_is_json_loads(raw):
    try:
        want = json.loads(raw)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            decode_json(raw)
    else:
        assert repr(decode_json(raw)) == repr(want)


def test_msgpack_values():
    ex = Extractor({"user": "user.id", "tag": "tag"}, "msgpack")
    value = msgpack.packb({"user": {"id": 9}, "tag": b"bin"})
    entries, skipped = ex.entries([record(0, value), record(1, b"\xc1")])
    assert entries == {"tag": [("bin", 1000, 0)], "user": [("9", 1000, 0)]}
    assert skipped == {("user", UNDECODABLE): 1, ("tag", UNDECODABLE): 1}


def test_sources():
    assert parse_source("key").kind == "key"
    assert parse_source("header.x.y").path == ("x.y",)
    assert parse_source("value.a.b").path == parse_source("a.b").path == ("a", "b")
    with pytest.raises(ValueError, match="value.PATH"):
        parse_source("a..b")
    with pytest.raises(ValueError, match="json, msgpack or registry"):
        Extractor({"f": "f"}, "avro")


# The default layout (every entry of these tests in ``recent``), and one moving every few
# entries to sorted runs merged two by two, so that queries, trims and rebuilds read and
# change entries spread over ``recent`` and several runs of several levels.
LAYOUTS = pytest.mark.parametrize("layout", [
    {}, {"recent_max": 3, "fanin": 2}, {"recent_max": 3, "fanin": 2, "background_merges": True},
], ids=["recent", "runs", "runs-merged-beside"])


@LAYOUTS
def test_the_store_commits_entries_with_offsets_in_one_transaction(tmp_path, layout):
    store = IndexStore(str(tmp_path / "i.db"), **layout)
    store.add(("t", 0), 0, 2, {"f": [("a", 10, 0), ("b", 20, 1)]}, {("f", MISSING): 2})
    store.add(("t", 1), 0, 1, {"f": [("a", 30, 0)]}, {})
    with pytest.raises(sqlite3.IntegrityError):  # records indexed twice fail loudly...
        store.add(("t", 0), 1, 3, {"g": [("x", 40, 2)], "f": [("c", 40, 2), ("b", 20, 1)]},
                  {("f", MISSING): 1})
    # ...and nothing of its batch is kept: neither entries nor offsets nor counts (nor the
    # field it named first).
    assert store.offsets() == {("t", 0): 2, ("t", 1): 1}
    assert store.entry_count() == 3 and store.skipped() == {("f", MISSING): 2}
    store.add(("t", 0), 2, 3, {"g": [("x", 40, 2)]}, {})
    assert store.lookup("g", "x") == [(40, "t", 0, 2)]
    assert store.lookup("f", "a") == [(30, "t", 1, 0), (10, "t", 0, 0)]  # newest first
    assert store.lookup("f", "a", since=11) == [(30, "t", 1, 0)]
    assert store.lookup("f", "a", until=30) == [(10, "t", 0, 0)]
    assert store.lookup("f", "a", limit=1) == [(30, "t", 1, 0)]
    assert store.lookup("nope", "a") == []
    # A rebuild empties it and moves the generation: a builder of the old one cannot write.
    generation = store.generation()
    store.rebuild()
    assert store.entry_count() == 0 and store.offsets() == {} and store.skipped() == {}
    with pytest.raises(Rebuilt):
        store.add(("t", 0), 0, 1, {"f": [("a", 10, 0)]}, {}, generation)
    assert store.entry_count() == 0
    store.add(("t", 0), 0, 2, {"f": [("a", 10, 0)]}, {}, generation + 1)
    store.add(("t", 1), 0, 1, {}, {}, generation + 1)
    store.close()
    reader = IndexStore(str(tmp_path / "i.db"), readonly=True)
    assert reader.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert reader.offsets() == {("t", 0): 2, ("t", 1): 1}
    reader.close()


@LAYOUTS
def test_trim_drops_the_entries_below_the_log_start_in_one_transaction(tmp_path, layout):
    store = IndexStore(str(tmp_path / "i.db"), **layout)
    # Two partitions written in interleaved batches (in the runs layout, each run holds both).
    for first in range(0, 30, 10):
        for p in (0, 1):
            store.add(("t", p), first, first + 10,
                      {f: [(f"{p}-{o % 3}", 1000 + o, o) for o in range(first, first + 10)]
                       for f in ("a", "b")}, {})
    store.wait_merges()
    levels = {level for (level,) in store.db.execute("SELECT level FROM runs")}
    assert levels == ({1, 2} if layout else set())  # six runs of 20 entries, merged by 2
    def kept(p):
        return sorted({o for f in ("a", "b") for v in range(3)
                       for _ts, _t, part, o in store.lookup(f, f"{p}-{v}") if part == p})
    # Partition 0 loses a whole batch and part of the next; partition 1 only part of one.
    assert store.trim({("t", 0): 15, ("t", 1): 4, ("t", 9): 100}) == 2 * 15 + 2 * 4
    assert kept(0) == list(range(15, 30)) and kept(1) == list(range(4, 30))
    assert store.trim({("t", 0): 15}) == 0  # again: nothing more
    assert store.trim({("t", 0): 30, ("t", 1): 20}) == 2 * 15 + 2 * 16
    assert kept(0) == [] and kept(1) == list(range(20, 30))
    assert store.entry_count() == 20 and store.offsets() == {("t", 0): 30, ("t", 1): 30}
    # A rebuilt index cannot be trimmed by a builder of the old generation.
    generation = store.generation()
    store.rebuild()
    with pytest.raises(Rebuilt):
        store.trim({("t", 1): 25}, generation)
    store.close()


def test_merges_beside_the_builder_go_by_chunks_and_an_interrupted_one_starts_over(
        tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "MERGE_CHUNK", 7)  # several transactions per merge
    path = str(tmp_path / "i.db")
    store = IndexStore(path, recent_max=10, fanin=2, background_merges=True)
    for first in range(0, 200, 10):
        store.add(("t", 0), first, first + 10,
                  {"f": [(f"v{o % 13}", 1000 + o, o) for o in range(first, first + 10)]}, {})
        # While runs merge, a query sees every committed entry, once.
        assert [o for *_, o in store.lookup("f", "v0")] == \
            [o for o in range(first + 9, -1, -1) if o % 13 == 0]
    store.wait_merges()
    runs = dict(store.db.execute("SELECT level, count(*) FROM runs GROUP BY level"))
    assert runs == {2: 1, 4: 1}  # 20 runs of 10 entries, merged two by two: 16 + 4
    # A merge cut short (a kill -9 or a close) leaves an unfinished run: dropped on the next
    # open, the entries where they were.
    run = store.db.execute("INSERT INTO runs (level, entries) VALUES (-1, 0)").lastrowid
    store.db.execute(f"CREATE TABLE run_{run} {ENTRY_TABLE}")
    (done,) = store.db.execute("SELECT min(id) FROM runs WHERE level >= 0").fetchone()
    store.db.execute(f"INSERT INTO run_{run} SELECT * FROM run_{done}")
    store.close()
    store = IndexStore(path, recent_max=10, fanin=2, background_merges=True)
    assert dict(store.db.execute("SELECT level, count(*) FROM runs GROUP BY level")) == runs
    assert store.db.execute("SELECT count(*) FROM sqlite_master WHERE name = ?",
                            (f"run_{run}",)).fetchone() == (0,)
    assert store.entry_count() == 200 and len(store.lookup("f", "v1")) == 16
    store.close()


def test_indexes_config_becomes_index_sinks_and_bad_input_is_named():
    config = parse_config({"indexes": {"orders": {"topics": "a, b", "fields": ["user_id"],
                                                  "path": "/srv/idx"}}})
    sink = config.all_sinks()["index.orders"]
    assert sink.plugin == "index" and sink.topics == ["a", "b"]
    assert sink.group("index.orders") == "databus-index-orders"
    assert sink.config == {"index": "orders", "path": "/srv/idx/orders.db",
                           "fields": {"user_id": "value.user_id"}, "format": "json",
                           "recent.entries": 1_000_000}
    for bad, message in [
        ({"topics": ["a"], "fields": {}}, "at least one field"),
        ({"topics": ["a"], "fields": {"f": "header."}}, "needs a name after 'header'"),
        ({"fields": ["f"]}, "exactly one of topics and topics.regex"),
        ({"topics": ["a"], "fields": ["f"], "format": "avro"}, "format"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config({"indexes": {"x": bad}})
    with pytest.raises(ConfigError, match="rename the sink"):
        parse_config({"indexes": {"x": {"topics": ["a"], "fields": ["f"]}},
                      "sinks": {"index.x": {"plugin": "parquet", "topics": ["a"]}}})
