"""Source offset -> target offset, for consumer-group failover (pure).

A group committed offset ``C`` on a source partition: it has processed every record before
``C``.  The target offset to resume from must not skip any copy of a record at ``C`` or
later (seeing a record again is allowed: the translation is conservative, as KAFKA-15906
made MirrorMaker 2's).

* From the partition's offset sync ``(s, t)`` (source offset ``s`` landed at ``t``): if
  ``s < C``, every record at ``C`` or later is copied after ``t`` (a partition is copied in
  order, and a restart only ever goes back), so the answer is ``t + 1``.
* Otherwise the target partition is searched: a bisection over target offsets, reading the
  provenance header of the first copy at or after each probe.  Copies are in source order
  except after a restart, which re-copies a contiguous run from an earlier point, so any
  target offset ``p`` whose copy comes from ``C`` or later while the copy before it came
  from before ``C`` is a safe resume point: every record from ``C`` on appears at ``p`` or
  later.  ``OffsetSearch`` is that bisection as a state machine; the shell reads.
"""

from __future__ import annotations

from .progress import OffsetSync


def from_sync(sync: OffsetSync | None, committed: int) -> int | None:
    """The target offset to resume from when the sync alone decides it, else None."""
    if sync is not None and 0 <= sync.source_offset < committed:
        return sync.target_offset + 1
    return None


class OffsetSearch:
    """Bisect target offsets in ``[start, end)`` (``end``: an offset known to be safe, e.g.
    the log end or a sync's ``t + 1``) for the resume point of source offset ``committed``.

        search = OffsetSearch(start, end, committed)
        while (probe := search.probe()) is not None:
            search.feed(probe, first_copy_at_or_after(probe, before=search.end))
        search.result

    ``feed(probe, found)``: ``found`` is ``(target_offset, source_offset)`` of the first copy
    from the source partition at target offset ``probe`` or later and before ``end``, or
    None if there is none.
    """

    def __init__(self, start: int, end: int, committed: int) -> None:
        self.committed = committed
        self.lo = start - 1  # every copy at or before lo came from before `committed`
        self.end = end       # resuming at end skips nothing
        self.probes = 0

    def probe(self) -> int | None:
        if self.end - self.lo <= 1:
            return None
        return (self.lo + self.end) // 2 if self.end - self.lo > 2 else self.lo + 1

    def feed(self, probe: int, found: tuple[int, int] | None) -> None:
        self.probes += 1
        if found is None or found[1] >= self.committed:
            # No copy from before `committed` in [probe, end): resuming at probe skips none.
            self.end = probe
        else:
            if not probe <= found[0] < self.end:
                raise ValueError(f"copy at {found[0]} is outside [{probe}, {self.end})")
            self.lo = found[0]

    @property
    def result(self) -> int:
        return self.end
