"""``databus bench storage``: throughput of the storage engine's append and read paths.

Records are 100-byte values (distinct, half random hex) without keys, in batches of
~16 KiB built beforehand with the real encoder, as a producer with default settings sends
them.  Three runs on a fresh partition log in a temporary directory:

* append, no fsync: ``PartitionLog.append`` of one batch per call, as fast as it goes;
* append, group commit: the same while a second thread runs ``flush()`` back to back (what the
  broker's group commit does); the figure counts only what is fsynced when the clock stops;
* sequential read: ``read(offset, 1 MiB)`` from the log start to its end (of the group-commit
  run's log, hot in the page cache: this is the engine's cost, not the disk's).

Each run stops at ``--seconds`` or ``--size-mb``, whichever comes first.  The temporary
directory (``--dir`` to choose where) is removed at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time


def add_arguments(parser) -> None:
    parser.add_argument("--seconds", type=float, default=3.0, help="time limit per run (3)")
    parser.add_argument("--size-mb", type=int, default=1024, help="data limit per run, MiB (1024)")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value (100)")
    parser.add_argument("--batch-size", type=int, default=16384, help="bytes per batch (16384)")
    parser.add_argument("--dir", default=None, help="parent of the temporary data directory")


def _batches(value_size: int, batch_size: int, count: int = 64) -> tuple[list[bytes], int]:
    from databus.protocol.records import BatchBuilder

    out = []
    per_batch = 0
    ts = int(time.time() * 1000)
    n = 0
    for _ in range(count):
        builder = BatchBuilder(batch_size=batch_size)
        while True:
            half = os.urandom(value_size // 4).hex()
            value = (f"{n:0{value_size - len(half)}d}" + half).encode()[:value_size]
            if not builder.append(ts, None, value):
                break
            n += 1
        per_batch = builder.record_count
        out.append(builder.build())
    return out, per_batch


def _append_run(directory: str, batches, per_batch: int, seconds: float, limit: int,
                group_commit: bool) -> dict:
    from databus.storage.config import LogConfig
    from databus.storage.partition_log import PartitionLog

    plog, _ = PartitionLog.open(directory, "bench", 0, LogConfig(), clean=True)
    stop = threading.Event()
    fsyncs = 0

    def flusher() -> None:
        nonlocal fsyncs
        while not stop.is_set():
            plog.flush()
            fsyncs += 1

    thread = threading.Thread(target=flusher) if group_commit else None
    written = 0
    calls = 0
    n = len(batches)
    append = plog.append
    start = time.perf_counter()
    deadline = start + seconds
    if thread:
        thread.start()
    try:
        while written < limit:
            written += len(batches[calls % n])
            append(batches[calls % n])
            calls += 1
            if not calls % 64 and time.perf_counter() > deadline:
                break
    finally:
        stop.set()
        if thread:
            thread.join()
    if group_commit:
        plog.flush()
        fsyncs += 1
    elapsed = time.perf_counter() - start
    records = plog.log_end_offset if not group_commit else plog.recovery_point
    plog.close()
    assert records == calls * per_batch
    return {"records": records, "bytes": written, "seconds": elapsed, "fsyncs": fsyncs}


def _read_run(directory: str, seconds: float) -> dict:
    from databus.storage.config import LogConfig
    from databus.storage.partition_log import PartitionLog

    plog, _ = PartitionLog.open(directory, "bench", 0, LogConfig(), clean=True)
    from databus.protocol.records import iter_headers

    offset = plog.log_start_offset
    end = plog.log_end_offset
    total = 0
    records = 0
    start = time.perf_counter()
    deadline = start + seconds
    try:
        while offset < end:
            data = plog.read(offset, 1 << 20)
            total += len(data)
            last = None
            for _pos, h in iter_headers(data):
                last = h
            records += last.next_offset - offset
            offset = last.next_offset
            if time.perf_counter() > deadline:
                break
    finally:
        elapsed = time.perf_counter() - start
        plog.close()
    return {"records": records, "bytes": total, "seconds": elapsed, "fsyncs": 0}


def run(args) -> int:
    from databus.cli_helpers.table import Column, print_table

    batches, per_batch = _batches(args.value_size, args.batch_size)
    limit = args.size_mb << 20
    root = tempfile.mkdtemp(prefix="databus-bench-storage-", dir=args.dir)
    try:
        results = []
        nofsync_dir = os.path.join(root, "nofsync-0")
        results.append(("append, no fsync",
                        _append_run(nofsync_dir, batches, per_batch, args.seconds, limit, False)))
        shutil.rmtree(nofsync_dir)
        gc_dir = os.path.join(root, "groupcommit-0")
        results.append(("append, group commit fsync",
                        _append_run(gc_dir, batches, per_batch, args.seconds, limit, True)))
        results.append(("sequential read (1 MiB reads)", _read_run(gc_dir, args.seconds)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    size = sum(map(len, batches)) / len(batches)
    print_table(
        [Column("run"), *(Column(header, justify="right")
                          for header in ("records", "MB", "seconds", "records/s", "MB/s",
                                         "fsyncs"))],
        [(name, f"{r['records']:,}", f"{r['bytes'] / 1e6:,.0f}", f"{r['seconds']:.2f}",
          f"{r['records'] / r['seconds']:,.0f}", f"{r['bytes'] / 1e6 / r['seconds']:,.0f}",
          str(r["fsyncs"] or "-"))
         for name, r in results],
        title=f"storage engine: {args.value_size}-byte records, {per_batch} per batch "
              f"({size:,.0f} bytes), {os.cpu_count()} cores",
    )
    return 0
