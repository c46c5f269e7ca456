"""The iceberg sink's columnar path (``write_columns``, what the runtime hands it) without the
runtime: the rows it builds from a consumer's RecordColumns equal those built from
ConsumerRecords, and a bad value in a columnar batch is rejected alone (by its row index)
while the rest is committed with the batch's offsets in the snapshot summary."""

from __future__ import annotations

import json

import pytest
from databus_plugins.iceberg.decode import Decoder
from databus_plugins.iceberg.options import parse_options
from databus_plugins.iceberg.sink import IcebergSink

from databus.client import ConsumerRecord
from databus.client.fetcher import decode_fetched, decode_fetched_columns
from databus.protocol.records import build_batch

T0 = 1_700_000_000_000


def _records(n, value):
    return [ConsumerRecord("t", 0, i, T0 + i * 1000, 0, None if i % 3 else b"k%d" % i,
                           value(i), (("h", b"x"), ("n", None)) if i % 5 == 0 else ())
            for i in range(n)]


def _fetched(recs):
    """The records as the consumer decodes them: (ConsumerRecords, RecordColumns)."""
    data = build_batch([(r.key, r.value, r.headers, r.timestamp, r.offset) for r in recs],
                       base_offset=recs[0].offset)
    return (decode_fetched("t", 0, data, recs[0].offset)[0],
            decode_fetched_columns("t", 0, data, recs[0].offset)[0])


@pytest.mark.parametrize("fmt", ["json", "raw"])
def test_columns_give_the_rows_of_records(fmt):
    def value(i):
        if i % 97 == 5:
            return None  # a tombstone: a row of nulls
        doc = {"id": i, "name": f"n{i % 7}", "amount": i / 4, "offset": -i}
        if i % 11 == 0:
            doc["tags"] = ["a", "b"]
        return json.dumps(doc).encode()

    records, columns = _fetched(_records(600, value))
    decoder = Decoder(fmt)
    by_records, rejected = decoder.table(records)
    by_columns = decoder.table_of_columns(columns.to_arrow())
    assert rejected == []
    assert by_columns is not None
    assert by_columns.schema == by_records.schema
    assert by_columns.equals(by_records)
    if fmt == "json":  # the value's own "offset" kept apart from Kafka's
        assert by_columns.column("value_offset")[7].as_py() == -7


def test_msgpack_and_bad_json_take_the_per_record_way():
    records, columns = _fetched(_records(10, lambda i: b"{bad" if i == 3 else b'{"id":1}'))
    assert Decoder("json").table_of_columns(columns.to_arrow()) is None
    assert Decoder("msgpack").table_of_columns(columns.to_arrow()) is None


def test_a_bad_value_in_a_columnar_batch_is_rejected_alone_and_the_rest_committed(tmp_path):
    import trio

    sink = IcebergSink(parse_options({"path": str(tmp_path), "namespace": "db"}))
    tp = ("t", 0)
    _, columns = _fetched(_records(
        40, lambda i: b"{not json" if i == 13 else json.dumps({"id": i}).encode()))

    async def run():
        await sink.open(tp, None)
        rejected = await sink.write_columns(tp, columns)
        return rejected, await sink.flush([tp], True)

    rejected, durable = trio.run(run)
    assert [i for i, _ in rejected] == [13]
    assert "json value does not decode" in rejected[0][1]
    assert durable == {tp: 40}
    table = sink.tables["db.t"].table
    rows = table.scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [i for i in range(40) if i != 13]
    assert json.loads(table.current_snapshot().summary["databus.offsets"]) == {"t": {"0": 40}}
