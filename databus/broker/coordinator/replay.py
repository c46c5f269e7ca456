"""Reading an internal topic back at start: every data record of a partition log, in order.

The coordinators keep their state in compacted internal topics (``__consumer_offsets``,
``__share_group_state``) and rebuild it at start by applying the records in log order;
this is the one loop that reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from databus.protocol.records import decode_batches

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20


def log_records(plog, name: str) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record of ``plog`` from its log start offset;
    control batches are skipped."""
    for header, records in log_batches(plog, name):
        if not header.is_control:
            for record in records:
                yield record.offset, record.key, record.value


def log_batches(plog, name: str) -> Iterator[tuple]:
    """(header, records at or after the read position) of every batch of ``plog`` from its
    log start offset, control batches included (transactional offset commits need them).
    A read that makes no progress (a corrupt tail) ends the partition with an error in the
    log rather than looping (``name`` says which)."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = bytes(plog.read(offset, READ_BYTES))
        if not data:
            break
        progressed = False
        for header, batch_records in decode_batches(data):
            if header.next_offset > offset:
                yield header, [r for r in batch_records if r.offset >= offset]
                offset = header.next_offset
                progressed = True
        if not progressed:
            log.error("%s: no progress replaying at offset %d; stopping this partition",
                      name, offset)
            break
