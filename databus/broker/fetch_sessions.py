"""Fetch sessions (KIP-227): THIS module owns the broker's fetch session cache.

Sans-I/O (no trio): the Fetch handler asks ``FetchSessionCache.begin`` what a request means,
reads the partitions it is given, and hands the results to ``FetchContext.respond``, which
picks what goes into the response.

What a request means (Kafka's FetchSession rules, by ``session_id`` / ``session_epoch``):

* ``(0, -1)``: no session (full request, full response, ``session_id`` 0);
* ``(N, -1)``: close session N, then as above;
* ``(N or 0, 0)``: close N if given, open a new session holding the request's partitions
  (full response carrying the new id; id 0 when the cache has no slot to give);
* ``(N, e > 0)``: an incremental request to session N whose next epoch must be ``e``
  (else INVALID_FETCH_SESSION_EPOCH; an unknown N is FETCH_SESSION_ID_NOT_FOUND).  The
  partitions it lists are added or get their new fetch offset and size, the forgotten ones
  leave, the others keep what the session remembers.  The response holds only the
  partitions with something new: records, an error, or a high watermark / last stable /
  log start offset that differs from the one last sent.

So a consumer of many partitions sends and receives only what changed; the broker still
looks at each session partition's offsets (an attribute compare, no read) on each fetch.
The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's
default 1000) and evicts the least recently used one to make room, as Kafka does for
sessions of equal privilege.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from databus.protocol.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
DEFAULT_SLOTS = 1000  # max.incremental.fetch.session.cache.slots

Key = tuple[str, int]


@dataclass
class _Cached:
    fetch: Any  # the FetchPartition the client last sent for it (offset, max bytes)
    sent: tuple[int, int, int] | None = None  # (high watermark, LSO, log start) last answered


@dataclass
class FetchSession:
    id: int
    epoch: int  # the epoch the next incremental request must carry
    partitions: OrderedDict[Key, _Cached] = field(default_factory=OrderedDict)


@dataclass
class FetchContext:
    """One Fetch request's view: ``partitions`` to read (in session order), the
    ``session_id`` to answer with, or a top-level ``error``."""

    partitions: list[tuple[str, Any]]
    session_id: int = 0
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    incremental: bool = False

    def respond(self, results: Iterable[tuple[str, Any]]) -> list[tuple[str, list]]:
        """The per-topic results to send, from ``(topic, PartitionResult)`` of every
        partition read: all of them for a full fetch, the changed ones for an incremental
        one; the session remembers what it answered."""
        out: list[tuple[str, list]] = []
        for topic, result in results:
            if self.session is not None:
                cached = self.session.partitions.get((topic, result.index))
                offsets = (result.high_watermark, result.last_stable_offset,
                           result.log_start_offset)
                changed = (cached is None or cached.sent != offsets or result.error_code != 0
                           or len(result.records) > 0)
                if cached is not None:
                    cached.sent = offsets
                if self.incremental and not changed:
                    continue
            if out and out[-1][0] == topic:
                out[-1][1].append(result)
            else:
                out.append((topic, [result]))
        return out


class FetchSessionCache:
    def __init__(self, max_slots: int = DEFAULT_SLOTS,
                 new_id: Callable[[], int] | None = None) -> None:
        self.max_slots = max_slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._new_id = new_id or (lambda: random.randint(1, 2**31 - 1))

    def __len__(self) -> int:
        return len(self._sessions)

    def begin(self, session_id: int, epoch: int, topics, forgotten) -> FetchContext:
        """What a Fetch request with these fields asks for (see the module docstring)."""
        listed = [(t.topic, p) for t in topics for p in t.partitions]
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            if session_id:
                self._sessions.pop(session_id, None)
            if epoch == FINAL_EPOCH or self.max_slots <= 0:
                return FetchContext(listed)
            session = self._open()
            for topic, p in listed:
                session.partitions[(topic, p.partition)] = _Cached(p)
            return FetchContext(listed, session.id, session=session)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext([], error=ErrorCode.fetch_session_id_not_found)
        if epoch != session.epoch:
            return FetchContext([], session_id, error=ErrorCode.invalid_fetch_session_epoch)
        self._sessions.move_to_end(session_id)
        session.epoch = _next_epoch(epoch)
        for f in forgotten:
            for index in f.partitions:
                session.partitions.pop((f.topic, index), None)
        for topic, p in listed:
            cached = session.partitions.get((topic, p.partition))
            if cached is None:
                session.partitions[(topic, p.partition)] = _Cached(p)
            else:
                cached.fetch = p
        partitions = [(topic, cached.fetch) for (topic, _), cached in session.partitions.items()]
        return FetchContext(partitions, session.id, session=session, incremental=True)

    def _open(self) -> FetchSession:
        while len(self._sessions) >= self.max_slots:
            self._sessions.popitem(last=False)  # the least recently used
        session_id = self._new_id()
        while session_id in self._sessions or session_id == 0:
            session_id = self._new_id()
        session = FetchSession(session_id, _next_epoch(INITIAL_EPOCH))
        self._sessions[session_id] = session
        return session


def _next_epoch(epoch: int) -> int:
    """Epochs run 1..2^31-1 and wrap to 1 (0 and -1 are the special ones)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1
