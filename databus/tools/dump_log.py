"""``databus dump-log``: print a segment file the way Kafka's kafka-dump-log does.

For a ``.log`` file: one line per batch (offsets, count, codec, timestamp type and
timestamps, producer id/epoch/sequences, transactional/control flags, file position, size,
CRC and whether it checks), and with ``--print-records`` one line per record (offset,
timestamp, key, value, headers; control records as their marker).  Bytes that are not
UTF-8 or not printable are shown escaped, so one record is always one line.  ``.index`` and
``.timeindex`` files are printed entry by entry.

A torn or corrupt batch is reported as a line ("torn batch at position N: ...") and the
command exits 1, without a traceback: this is the tool to look at a damaged log with.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from contextlib import contextmanager

from databus.protocol.records import (
    CODEC_NAMES,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    CorruptRecordError,
    compute_crc,
    control_coordinator_epoch,
    control_record_type,
    control_type_name,
    decode_records,
    parse_header,
)
from databus.storage.offset_index import OffsetIndex
from databus.storage.segment import base_offset_of
from databus.storage.time_index import TimeIndex


def add_arguments(parser) -> None:
    parser.add_argument(
        "files", nargs="+", metavar="PATH", help="segment files (.log, .index or .timeindex)"
    )
    parser.add_argument(
        "--print-records",
        "--print-data-log",
        action="store_true",
        help="also print every record of every batch (decompressed)",
    )


def run(args) -> int:
    status = 0
    out = _Output(sys.stdout)
    try:
        for path in args.files:
            status = max(status, dump_file(path, out, print_records=args.print_records))
    except BrokenPipeError:
        # `databus dump-log x.log | head`: the reader left; stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return status
    return status


class _Output:
    def __init__(self, stream) -> None:
        self.line = stream.write

    def __call__(self, text: str) -> None:
        self.line(text + "\n")


def dump_file(path: str, out, *, print_records: bool = False) -> int:
    """Print one file; return 0 when it is intact, 1 when damaged or unreadable."""
    out(f"Dumping {path}")
    base_offset = base_offset_of(path)
    try:
        with _mapped(path) as buf:
            if path.endswith(".timeindex"):
                return _dump_time_index(buf, base_offset, out)
            if path.endswith(".index"):
                return _dump_offset_index(buf, base_offset, out)
            if base_offset is not None:
                out(f"Log starting offset: {base_offset}")
            return _dump_log(buf, out, print_records)
    except OSError as exc:
        out(f"cannot read {path}: {exc.strerror or exc}")
        return 1


@contextmanager
def _mapped(path: str):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            yield m


def _dump_log(buf, out, print_records: bool) -> int:
    pos, end, status = 0, len(buf), 0
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_SIZE:
            out(
                f"torn batch at position {pos}: {remaining} bytes left, a batch header needs {HEADER_SIZE}"
            )
            return 1
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            out(f"torn batch at position {pos}: invalid batch length {h.batch_length}")
            return 1
        if h.size > remaining:
            out(f"torn batch at position {pos}: batch of {h.size} bytes but only {remaining} left")
            return 1
        if h.magic != MAGIC_V2:
            out(f"torn batch at position {pos}: magic {h.magic}, only 2 is supported")
            return 1
        crc_ok = compute_crc(buf, pos, h.size) == h.crc
        out(_batch_line(h, pos, crc_ok))
        if not crc_ok:
            status = 1
        if print_records:
            status = max(status, _print_records(buf, pos, h, out))
        pos += h.size
    return status


def _batch_line(h, pos: int, crc_ok: bool) -> str:
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count}"
        f" baseSequence: {h.base_sequence} lastSequence: {h.last_sequence}"
        f" producerId: {h.producer_id} producerEpoch: {h.producer_epoch}"
        f" partitionLeaderEpoch: {h.partition_leader_epoch}"
        f" isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)}"
        f" position: {pos} {_timestamp_type(h.timestamp_type)}"
        f" baseTimestamp: {h.base_timestamp} maxTimestamp: {h.max_timestamp}"
        f" size: {h.size} magic: {h.magic}"
        f" compresscodec: {CODEC_NAMES.get(h.codec, f'unknown({h.codec})')}"
        f" crc: {h.crc} isvalid: {_bool(crc_ok)}"
    )


def _print_records(buf, pos: int, h, out) -> int:
    try:
        _, records = decode_records(buf, pos, verify_crc=False)
    except CorruptRecordError as exc:
        out(f"| cannot decode the records of the batch at position {pos}: {exc}")
        return 1
    ts_name = _timestamp_type(h.timestamp_type)
    for r in records:
        if h.base_sequence < 0:
            sequence = -1
        else:
            sequence = (h.base_sequence + r.offset - h.base_offset) % 2**31
        line = (
            f"| offset: {r.offset} {ts_name}: {r.timestamp}"
            f" keySize: {_size(r.key)} valueSize: {_size(r.value)} sequence: {sequence}"
            f" headers: [{', '.join(f'{_text(k.encode())}={_show(v)}' for k, v in r.headers)}]"
        )
        if h.is_control:
            line += " " + _control_text(r)
        else:
            line += f" key: {_show(r.key)} payload: {_show(r.value)}"
        out(line)
    return 0


def _control_text(record) -> str:
    try:
        kind = control_type_name(control_record_type(record.key))
    except CorruptRecordError:
        return f"invalid control record key: {_show(record.key)}"
    coordinator_epoch = control_coordinator_epoch(record.value)
    if coordinator_epoch is not None:
        return f"endTxnMarker: {kind} coordinatorEpoch: {coordinator_epoch}"
    return f"controlType: {kind}"


def _dump_offset_index(buf, base_offset: int | None, out) -> int:
    return _dump_entries(
        buf,
        OffsetIndex.entry,  # relative offset, position
        lambda rel, position: f"offset: {(base_offset or 0) + rel} position: {position}",
        out,
    )


def _dump_time_index(buf, base_offset: int | None, out) -> int:
    return _dump_entries(
        buf,
        TimeIndex.entry,  # timestamp, relative offset
        lambda ts, rel: f"timestamp: {ts} offset: {(base_offset or 0) + rel}",
        out,
    )


def _dump_entries(buf, entry: struct.Struct, describe, out) -> int:
    end = len(buf) - len(buf) % entry.size
    for pos in range(0, end, entry.size):
        fields = entry.unpack_from(buf, pos)
        if pos and not any(fields):
            break  # the zero-filled, preallocated rest of the file
        out(describe(*fields))
    if len(buf) % entry.size:
        out(f"torn entry at position {end}: {len(buf) - end} bytes, an entry has {entry.size}")
        return 1
    return 0


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _timestamp_type(kind: int) -> str:
    return "LogAppendTime" if kind else "CreateTime"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _show(data: bytes | None) -> str:
    return "null" if data is None else _text(data)


def _text(data: bytes) -> str:
    """UTF-8 text as is; undecodable bytes as \\xNN, other unprintables escaped, \\ doubled."""
    text = data.decode("utf-8", "surrogateescape")
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)
