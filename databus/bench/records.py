"""``databus bench records``: cost per record of RecordBatch v2 encoding and decoding.

The producer encodes every record (BatchBuilder.append_many) and the consumer decodes every
record (decode_records), in the C extension when it is built (else, or with
DATABUS_PURE_PYTHON=1, in pure Python), so these two figures bound what one core can push
through the client.  Records are 100-byte JSON-ish values (different per record, half
of each random hex) with no key, in batches filled up to batch.size = 16 KiB, as a producer
with default settings builds them.  Each figure is the best of several rounds with the
garbage collector paused, as timeit does, to filter out noise from other processes.
"""

from __future__ import annotations

import os
import time

from .common import best_seconds


def add_arguments(parser) -> None:
    parser.add_argument(
        "--codecs", default="none,lz4", help="comma-separated codecs (default: none,lz4)"
    )
    parser.add_argument("--records", type=int, default=20000, help="records per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best is reported")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value")
    parser.add_argument("--batch-size", type=int, default=16384, help="batch.size in bytes")


def run(args) -> int:
    from databus.cli_helpers.table import Column, print_table
    from databus.protocol.records import CODEC_BY_NAME

    values = [_value(i, args.value_size) for i in range(args.records)]
    timestamp = int(time.time() * 1000)
    columns = [Column("codec"), *(Column(header, justify="right") for header in (
        "rec/batch", "bytes/batch", "enc µs/rec", "dec µs/rec", "enc rec/s", "dec rec/s",
    ))]
    rows = []
    for name in args.codecs.split(","):
        codec = CODEC_BY_NAME[name.strip()]
        encode_s = best_seconds(
            lambda c=codec: _encode(values, timestamp, c, args.batch_size), args.rounds
        )
        batches = _encode(values, timestamp, codec, args.batch_size)
        decode_s = best_seconds(lambda b=batches: _decode(b), args.rounds)
        assert _decode(batches) == len(values)
        n = len(values)
        rows.append((
            name,
            f"{n / len(batches):.0f}",
            f"{sum(map(len, batches)) / len(batches):.0f}",
            f"{encode_s / n * 1e6:.3f}",
            f"{decode_s / n * 1e6:.3f}",
            f"{n / encode_s:,.0f}",
            f"{n / decode_s:,.0f}",
        ))
    from databus.protocol.speedups import implementation

    print_table(columns, rows, title=f"RecordBatch v2, {args.value_size}-byte values, "
                                     f"batch.size {args.batch_size}, {implementation()}")
    return 0


def _encode(values, timestamp: int, codec: int, batch_size: int) -> list[bytes]:
    from databus.protocol.records import BatchBuilder

    # As the producer and the sidecar encode: runs of records through append_many.
    records = [(timestamp, None, value, ()) for value in values]
    batches = []
    start = 0
    while start < len(records):
        builder = BatchBuilder(codec=codec, batch_size=batch_size)
        start = builder.append_many(records, start)
        batches.append(builder.build())
    return batches


def _decode(batches) -> int:
    from databus.protocol.records import decode_records

    return sum(len(decode_records(batch)[1]) for batch in batches)


def _value(i: int, size: int) -> bytes:
    """A JSON-ish event, different per record, padded with random hex to ``size`` bytes."""
    head = b'{"id":%d,"user":"u%d","page":"/p/%d","pad":"' % (i, i % 1000, i % 97)
    pad = os.urandom(size).hex().encode()
    return (head + pad)[: size - 2] + b'"}'

