"""Offset planning for the databus source: pure Python, no Spark, no sockets.

The I/O shell (client.py) asks the cluster what this module says it needs (which
partitions exist, their earliest/latest offsets, offsets for timestamps) and hands the
answers back here; everything that decides which offsets a batch or a micro-batch reads
lives here and is tested without a cluster:

- ``start_requests`` / ``resolve_offsets``: startingOffsets / startingTimestamp /
  startingOffsetsByTimestamp (and the ending ones of a batch) -> one offset per partition;
- ``plan_ranges``: [start, end) per partition, with the data-loss checks of Kafka's source
  (offsets gone to retention, partitions deleted, topics recreated, new partitions that do not
  start at 0) and the ``minPartitions`` split;
- ``rate_limit``: ``maxOffsetsPerTrigger`` split across partitions in proportion to their lag;
- ``to_json`` / ``from_json``: offsets in Kafka's JSON shape ``{"topic": {"0": 5}}``, the
  shape Spark stores in the checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .options import EARLIEST, LATEST, OffsetSpec, OptionError, TopicPartition

Offsets = dict[TopicPartition, int]
INT64_MAX = 2**63 - 1


class DataLossError(RuntimeError):
    """Offsets the query should read are gone (and ``failOnDataLoss`` is true)."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records [start, end) of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- JSON offsets ---------------------------------------------------------------------------

def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{(t, 0): 5} -> {"t": {"0": 5}} (topics and partitions sorted, as Kafka writes them)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(value: Mapping | str | None) -> Offsets:
    """The inverse of to_json; also takes the JSON text Spark may hand over."""
    if value is None:
        return {}
    if isinstance(value, str):
        import json

        value = json.loads(value)
    return {(topic, int(p)): int(off) for topic, parts in value.items() for p, off in parts.items()}


# -- which partitions ------------------------------------------------------------------------

def require_all_partitions(spec: OffsetSpec, partitions: Iterable[TopicPartition], display: str) -> None:
    """Kafka's rule: per-partition JSON must name exactly the partitions the query reads."""
    if spec.kind not in ("offsets", "timestamps"):
        return
    have, want = set(spec.offsets), set(partitions)
    if have != want:
        missing, extra = sorted(want - have), sorted(have - want)
        parts = []
        if missing:
            parts.append("missing " + ", ".join(map(_name, missing)))
        if extra:
            parts.append("not read by this query " + ", ".join(map(_name, extra)))
        raise OptionError(
            f"option '{display}' must give every partition the query reads "
            f"(-2 for earliest, -1 for latest): {'; '.join(parts)}"
        )


# -- starting and ending offsets ------------------------------------------------------------

def start_requests(
    spec: OffsetSpec, partitions: list[TopicPartition], display: str
) -> dict[TopicPartition, int]:
    """What to ask ListOffsets for: {tp: EARLIEST | LATEST | timestamp}; partitions with a
    fixed offset need no lookup and are left out.  Per-partition JSON (option ``display``)
    must name exactly ``partitions``."""
    require_all_partitions(spec, partitions, display)
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        if spec.kind == "earliest":
            out[tp] = EARLIEST
        elif spec.kind == "latest":
            out[tp] = LATEST
        elif spec.kind == "timestamp":
            out[tp] = spec.timestamp
        elif spec.kind == "timestamps" or spec.offsets[tp] in (EARLIEST, LATEST):
            out[tp] = spec.offsets[tp]
    return out


def resolve_offsets(
    spec: OffsetSpec,
    partitions: Iterable[TopicPartition],
    looked_up: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    strict: bool,
    display: str,
) -> Offsets:
    """One offset per partition from ``spec`` and the answers to ``start_requests``.

    A timestamp lookup with no record at or after it (offset -1) fails when ``strict``
    (startingOffsetsByTimestampStrategy=error), else resolves to the partition's latest offset
    (the rule for ending timestamps too).
    """
    out: Offsets = {}
    timestamps = spec.kind in ("timestamp", "timestamps")
    for tp in partitions:
        if spec.kind == "offsets" and spec.offsets[tp] >= 0:
            out[tp] = spec.offsets[tp]
            continue
        offset = looked_up[tp]
        if timestamps and offset < 0:
            if strict:
                ts = spec.timestamp if spec.kind == "timestamp" else spec.offsets[tp]
                raise OptionError(
                    f"option '{display}': no record of {_name(tp)} has a timestamp >= {ts} "
                    "(set startingOffsetsByTimestampStrategy=latest to start at the end)"
                )
            offset = latest[tp]
        out[tp] = offset
    return out


# -- ranges ---------------------------------------------------------------------------------

def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    *,
    fail_on_data_loss: bool,
    new_partitions_from_zero: bool = False,
) -> tuple[list[OffsetRange], list[str]]:
    """The ranges [start, end) to read, and the data-loss warnings (when not failing).

    ``end`` decides which partitions are read.  A partition of ``end`` missing from
    ``start`` is new since the last batch: it starts at its earliest offset (and with
    ``new_partitions_from_zero``, anything below that was lost).  A partition of ``start``
    missing from ``end`` was deleted.  A start below the earliest offset lost the records
    between them to retention; an end below the start means the partition was recreated or
    truncated.  With ``fail_on_data_loss`` each of these raises DataLossError naming the
    partition and offsets, otherwise it becomes a warning and the range is adjusted (skipped
    records are not read; a truncated partition reads nothing).
    """
    warnings: list[str] = []

    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(
                message + ". Some data may have been lost (retention, or a deleted or "
                "recreated topic). Set failOnDataLoss=false to continue with a warning."
            )
        warnings.append(message)

    for tp in sorted(set(start) - set(end)):
        lost(f"partition {_name(tp)} is gone (deleted?) after offset {start[tp]}")

    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        until = end[tp]
        if tp in start:
            begin = start[tp]
        else:
            begin = earliest.get(tp, 0)
            if new_partitions_from_zero and begin > 0:
                lost(f"new partition {_name(tp)} starts at offset {begin}, not 0: "
                     f"records [0, {begin}) were never read")
        low = earliest.get(tp)
        if low is not None and begin < low:
            lost(f"records [{begin}, {min(low, until)}) of {_name(tp)} are gone: its earliest "
                 f"offset is now {low}")
            begin = low
        if until < begin:
            lost(f"{_name(tp)} ends at offset {until}, before the start {begin} "
                 "(recreated or truncated?)")
            continue
        if until > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges, warnings


def split_for_min_partitions(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Kafka's KafkaOffsetRangeCalculator: with fewer ranges than ``minPartitions``, split
    each in proportion to its share of all offsets (at least one piece each)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        # Math.round in Kafka's calculator: half up (Python's round() is half to even)
        parts = max(math.floor(r.size / total * min_partitions + 0.5), 1)
        for i in range(parts):
            lo = r.start + r.size * i // parts
            hi = r.start + r.size * (i + 1) // parts
            if hi > lo:
                out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    limit: int,
    earliest_of_new: Mapping[TopicPartition, int] | None = None,
) -> Offsets:
    """Kafka's ``maxOffsetsPerTrigger``: the end offsets after reading at most ``limit``
    offsets from ``start``, shared in proportion to each partition's lag.

    A partition's share is ``limit * lag / total`` floored, but ceiled when below 1 so that a
    small partition is not starved; never past its latest offset.  Partitions not in
    ``start`` begin at ``earliest_of_new`` (new partitions start at earliest).
    """
    new = earliest_of_new or {}

    def begin_of(tp: TopicPartition) -> int | None:
        return start[tp] if tp in start else new.get(tp)

    sizes = {}
    for tp, end in latest.items():
        begin = begin_of(tp)
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        share = math.ceil(share) if share < 1 else math.floor(share)
        begin = begin_of(tp)
        out[tp] = min(end, INT64_MAX if share > INT64_MAX - begin else begin + share)
    return out


def cap(offsets: Mapping[TopicPartition, int], ceiling: Mapping[TopicPartition, int]) -> Offsets:
    """Offsets no further than ``ceiling`` (the AvailableNow target); partitions the ceiling
    does not know (they appeared after the target was taken) are left out."""
    return {tp: min(off, ceiling[tp]) for tp, off in offsets.items() if tp in ceiling}


def lag(position: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    """Offsets between ``position`` and ``latest``, summed (new partitions count from 0)."""
    return sum(max(0, end - position.get(tp, 0)) for tp, end in latest.items())
