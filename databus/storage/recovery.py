"""Loading a partition directory, in numbered passes (as Kafka's LogLoader):

1. stray files: delete ``*.tmp``, ``*.cleaned`` (an interrupted compaction: the original
   segment is still whole) and ``*.deleted`` leftovers; delete ``.index`` / ``.timeindex``
   files whose ``.log`` is gone.
2. segments: open every ``<20-digit>.log`` in offset order.
3. unflushed region (after an unclean stop only): every segment holding offsets at or after
   the recovery point is re-validated batch by batch (length, magic, CRC-32C, increasing
   offsets); the log is truncated after the last good batch and every later segment is
   deleted; the indexes of those segments are rebuilt from the log.
4. indexes of the other segments: loaded and checked (whole entries, increasing, within the
   log, last entry names the right batch, no entry missing at the tail); a missing or damaged
   index is rebuilt from the log's batch headers.

Every action is returned as one human-readable line (and logged), e.g.
``orders-0: 00000000000000000042.log: truncated 37 bytes at position 1234 (...)``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

from .segment import Segment

log = logging.getLogger(__name__)

_SEGMENT_LOG = re.compile(r"^(\d{20})\.log$")
_STRAY_SUFFIXES = (".tmp", ".cleaned", ".deleted")
_INDEX_SUFFIXES = (".index", ".timeindex")


@dataclass
class LoadResult:
    segments: list[Segment]
    actions: list[str] = field(default_factory=list)
    recovered: bool = False  # some segment was re-validated: fsync before trusting it


def _act(result: LoadResult, name: str, text: str, level: int = logging.INFO) -> None:
    line = f"{name}: {text}"
    result.actions.append(line)
    log.log(level, "recovery: %s", line)


def clean_stray_files(directory: str, name: str, result: LoadResult) -> None:
    """Pass 1 (see the module docstring)."""
    files = set(os.listdir(directory))
    for fname in sorted(files):
        if fname.endswith(_STRAY_SUFFIXES):
            os.unlink(os.path.join(directory, fname))
            files.discard(fname)
            _act(result, name, f"deleted leftover file {fname}")
    for fname in sorted(files):
        stem, _, suffix = fname.partition(".")
        if "." + suffix in _INDEX_SUFFIXES and f"{stem}.log" not in files:
            os.unlink(os.path.join(directory, fname))
            _act(result, name, f"deleted {fname}: it has no .log segment")


def load_segments(directory: str, name: str, *, index_interval_bytes: int,
                  segment_index_bytes: int, recovery_point: int, clean: bool,
                  now_ms: int) -> LoadResult:
    """Passes 1-4 for one partition directory; returns its segments in offset order (the
    caller creates the first one if there is none)."""
    result = LoadResult(segments=[])
    clean_stray_files(directory, name, result)
    bases = sorted(int(m.group(1)) for f in os.listdir(directory)
                   if (m := _SEGMENT_LOG.match(f)))
    segments: list[Segment] = []
    for base in bases:
        seg = Segment.open_existing(directory, base, index_interval_bytes=index_interval_bytes,
                                    segment_index_bytes=segment_index_bytes, now_ms=now_ms)
        segments.append(seg)
    expected_base = None
    for i, seg in enumerate(segments):
        fname = os.path.basename(seg.log_path)
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        unflushed = not clean and (next_base is None or next_base > recovery_point)
        problem = None if unflushed else seg.load_indexes()
        if problem is not None and problem.startswith("log:"):
            unflushed = True  # a torn batch in a "flushed" segment: treat it as unflushed
            _act(result, name, f"{fname}: {problem[5:]}; re-validating the segment",
                 logging.WARNING)
        if unflushed:
            size_before = seg.size
            cut, reason = seg.rebuild(validate=True, expected_base=expected_base)
            seg.seal()  # as after a roll: the time index ends with the largest timestamp
            result.recovered = True
            if cut or reason:
                _act(result, name,
                     f"{fname}: truncated {cut} bytes at position {seg.size} ({reason}); "
                     f"the log now ends at offset {seg.next_offset}", logging.WARNING)
                for later in segments[i + 1:]:
                    later.delete_files()
                    _act(result, name, f"deleted {os.path.basename(later.log_path)}: it follows "
                                       "a truncated segment", logging.WARNING)
                del segments[i + 1:]
                result.segments = segments
                break
            # Nothing was wrong, only unverified: an action (counted in the start-up summary
            # line) but not a line per partition at INFO.
            _act(result, name, f"{fname}: re-validated {size_before} bytes after an unclean "
                               "shutdown, indexes rebuilt", logging.DEBUG)
        elif problem is not None:
            seg.rebuild(validate=False)
            seg.seal()
            _act(result, name, f"{fname}: rebuilt indexes ({problem})", logging.WARNING)
        expected_base = seg.next_offset
    result.segments = segments
    return result
