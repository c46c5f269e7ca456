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

So a consumer of many partitions sends and receives only what changed, and the broker reads
only that: each session keeps the set of its partitions that may have news (``touch``ed by
an append, listed by the client, or still holding data the last response had no room for;
``touch_all`` after a retention run or a topic deletion, which move log start offsets or
remove partitions), and an incremental fetch looks at those alone.
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
    order: int  # its place in the session (responses follow the session's order)
    sent: tuple[int, int, int] | None = None  # (high watermark, LSO, log start) last answered


@dataclass(eq=False)
class FetchSession:
    id: int
    epoch: int  # the epoch the next incremental request must carry
    partitions: dict[Key, _Cached] = field(default_factory=dict)
    watch: set[Key] = field(default_factory=set)  # the partitions that may have news
    _next_order: int = 0

    def add(self, key: Key, fetch) -> None:
        cached = self.partitions.get(key)
        if cached is None:
            self.partitions[key] = _Cached(fetch, self._next_order)
            self._next_order += 1
        else:
            cached.fetch = fetch
        self.watch.add(key)

    def to_read(self) -> list[tuple[str, Any]]:
        """The watched partitions, in session order."""
        keys = sorted((k for k in self.watch if k in self.partitions),
                      key=lambda k: self.partitions[k].order)
        return [(k[0], self.partitions[k].fetch) for k in keys]


@dataclass
class FetchContext:
    """One Fetch request's view: the ``session_id`` to answer with, or a top-level
    ``error``; ``to_read()`` the partitions to read now (in session order)."""

    partitions: list[tuple[str, Any]]
    session_id: int = 0
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    incremental: bool = False

    def to_read(self) -> list[tuple[str, Any]]:
        """Asked again after each long-poll wake-up: an append meanwhile adds its partition."""
        if self.incremental:
            return self.session.to_read()
        return self.partitions

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
                    self._rewatch(topic, result, cached)
                if self.incremental and not changed:
                    continue
            if out and out[-1][0] == topic:
                out[-1][1].append(result)
            else:
                out.append((topic, [result]))
        return out

    def _rewatch(self, topic, result, cached: _Cached) -> None:
        """Keep watching a partition only while it may still have news: an error, or data
        beyond its fetch offset (this response may have had no room for it)."""
        key = (topic, result.index)
        if result.error_code != 0 or cached.fetch.fetch_offset < result.high_watermark:
            self.session.watch.add(key)
        else:
            self.session.watch.discard(key)


class FetchSessionCache:
    def __init__(self, max_slots: int = DEFAULT_SLOTS,
                 new_id: Callable[[], int] | None = None) -> None:
        self.max_slots = max_slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._by_partition: dict[Key, set[FetchSession]] = {}
        self._new_id = new_id or (lambda: random.randint(1, 2**31 - 1))

    def __len__(self) -> int:
        return len(self._sessions)

    def begin(self, session_id: int, epoch: int, topics, forgotten) -> FetchContext:
        """What a Fetch request with these fields asks for (see the module docstring)."""
        listed = [(t.topic, p) for t in topics for p in t.partitions]
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            if session_id:
                self._close(session_id)
            if epoch == FINAL_EPOCH or self.max_slots <= 0:
                return FetchContext(listed)
            session = self._open()
            for topic, p in listed:
                self._add(session, (topic, p.partition), p)
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
                self._forget(session, (f.topic, index))
        for topic, p in listed:
            self._add(session, (topic, p.partition), p)
        return FetchContext([], session.id, session=session, incremental=True)

    def touch(self, key: Key) -> None:
        """``key`` got an append: the sessions holding it look at it on their next fetch."""
        for session in self._by_partition.get(key, ()):
            session.watch.add(key)

    def touch_all(self) -> None:
        """Log start offsets moved or partitions vanished (retention, a topic deletion):
        every session looks at all its partitions once."""
        for session in self._sessions.values():
            session.watch.update(session.partitions)

    def all_partitions(self, context: FetchContext) -> list[Key]:
        """What a long poll waits on: every partition of the session (or the request)."""
        if context.session is not None:
            return list(context.session.partitions)
        return [(topic, p.partition) for topic, p in context.partitions]

    def _add(self, session: FetchSession, key: Key, fetch) -> None:
        session.add(key, fetch)
        self._by_partition.setdefault(key, set()).add(session)

    def _forget(self, session: FetchSession, key: Key) -> None:
        if session.partitions.pop(key, None) is not None:
            session.watch.discard(key)
            holders = self._by_partition.get(key)
            if holders is not None:
                holders.discard(session)
                if not holders:
                    del self._by_partition[key]

    def _close(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            for key in list(session.partitions):
                self._forget(session, key)

    def _open(self) -> FetchSession:
        while len(self._sessions) >= self.max_slots:
            self._close(next(iter(self._sessions)))  # the least recently used
        session_id = self._new_id()
        while session_id in self._sessions or session_id == 0:
            session_id = self._new_id()
        session = FetchSession(session_id, _next_epoch(INITIAL_EPOCH))
        self._sessions[session_id] = session
        return session


def _next_epoch(epoch: int) -> int:
    """Epochs run 1..2^31-1 and wrap to 1 (0 and -1 are the special ones)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1
