"""Fetch (key 1): stored batches, untouched, with a long poll woken by appends.

- Each partition's data starts with the whole batch containing the fetch offset (clients
  skip the records before it); the first partition with data always gets at least one whole
  batch even beyond max_bytes, later ones only what fits (Kafka's rule, so a big batch can
  never wedge a consumer).  ``partition_max_bytes`` caps each partition, the broker's
  ``fetch.max.bytes`` the whole response.
- Long poll: with fewer than ``min_bytes`` available, the request sleeps until an append to
  one of its partitions (AppendNotifier) or ``max_wait_ms``, then reads again; never polls.
- Single node: high watermark = log end offset; the last stable offset is the first offset
  of the oldest open transaction (or the high watermark).  ``isolation.level=read_committed``
  reads stop at it and carry the aborted transactions (producer id, first offset) that
  overlap what they return, which the client drops along with the control batches;
  read_uncommitted gets a null list.  An offset outside [log start, log end] is
  OFFSET_OUT_OF_RANGE.
- A partition with an error gets empty records (never null) and -1 offsets, as from Kafka:
  librdkafka cannot parse null records, and would never see the error (nor reset).
- A topic the principal may not READ gets TOPIC_AUTHORIZATION_FAILED on each partition.
- Fetch sessions (KIP-227, v7+): broker/fetch_sessions.py says which partitions a request
  means (a new session's, or an incremental request's session partitions) and which of the
  results to send (an incremental response holds only the partitions with news).  The long
  poll waits on every partition of the session.
- v13+ name topics by topic id (KIP-516), in the request and the response: an id no topic
  has is UNKNOWN_TOPIC_ID for each of its partitions.
- The response is hand-encoded (fetch_encoding.py) so record bytes are not copied again.
"""

from __future__ import annotations

import logging
import uuid
from typing import NamedTuple

import trio

from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from databus.protocol.fetch_encoding import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    encode_fetch_body,
)
from databus.protocol.records import iter_headers
from databus.storage.acls import Operation, ResourceType

from ..api import RawResponse, RequestContext, handles
from ..errors import error_code_for

log = logging.getLogger(__name__)

READ_COMMITTED = 1
ZERO_UUID = uuid.UUID(int=0)


class _Topic(NamedTuple):
    """A request topic by name (or, for an unknown v13+ topic id, by that id)."""

    topic: str | uuid.UUID
    partitions: tuple


def _named(ctx: RequestContext, request) -> tuple[list, list]:
    """The request's topics and forgotten topics by name: v13+ requests carry topic ids."""
    forgotten = getattr(request, "forgotten_topics_data", ())
    if ctx.api_version < 13:
        return list(request.topics), list(forgotten)
    names = {info.topic_id: name for name, info in ctx.broker.log_manager.topics().items()}
    return ([_Topic(names.get(t.topic_id, t.topic_id), t.partitions) for t in request.topics],
            [_Topic(names.get(f.topic_id, f.topic_id), f.partitions) for f in forgotten])


def _by_id(ctx: RequestContext, topics: list) -> list:
    """v13+: the response's topics by topic id."""
    if ctx.api_version < 13:
        return topics
    infos = ctx.broker.log_manager.topics()
    return [(name if isinstance(name, uuid.UUID)
             else getattr(infos.get(name), "topic_id", ZERO_UUID), partitions)
            for name, partitions in topics]


def _read_partition(broker, topic: str, fetch, budget: int, first: bool, committed: bool):
    """One partition's PartitionResult and the number of record bytes it carries.

    A partition with an error is ``PartitionResult(index, code)``: empty records and -1
    offsets, exactly what Kafka sends (clients reset on OFFSET_OUT_OF_RANGE from that)."""
    index = fetch.partition
    plog = broker.get_log(topic, index)
    if plog is None:
        missing = (ErrorCode.unknown_topic_id if isinstance(topic, uuid.UUID)
                   else ErrorCode.unknown_topic_or_partition)
        return PartitionResult(index, missing), 0
    end = plog.log_end_offset
    start = plog.log_start_offset
    offset = fetch.fetch_offset
    if offset < start or offset > end:
        return PartitionResult(index, ErrorCode.offset_out_of_range), 0
    stable = plog.last_stable_offset
    # read_committed gets a (maybe empty) aborted-transactions list, read_uncommitted null
    result = PartitionResult(index, 0, end, stable, start, () if committed else None)
    limit = min(fetch.partition_max_bytes, budget)
    upper = stable if committed else end
    if offset >= upper or limit <= 0 and not first:
        return result, 0
    try:
        data = plog.read(offset, max(limit, 1), max_offset=upper if committed else None)
    except Exception as exc:
        code = error_code_for(exc)
        if code is ErrorCode.unknown_server_error:
            log.exception("read of %s-%d at %d failed", topic, index, offset)
        return PartitionResult(index, code), 0
    if len(data) > limit and not first:
        return result, 0  # only the first partition with data may exceed the budget
    result.records = data
    if committed and data:
        last = offset
        for _pos, h in iter_headers(data):
            last = h.next_offset
        result.aborted_transactions = tuple(
            (a.producer_id, a.first_offset) for a in plog.aborted_transactions(offset, last))
    return result, len(data)


def _read_all(ctx: RequestContext, request, wanted) -> tuple[list, int, bool]:
    """(topic, PartitionResult) of each ``wanted`` (topic, FetchPartition), record bytes,
    whether any partition has an error."""
    broker = ctx.broker
    # the broker's fetch.max.bytes caps what a client may ask for (memory per request)
    budget = min(request.max_bytes, broker.config.fetch_max_bytes)
    committed = request.isolation_level == READ_COMMITTED
    total = 0
    errors = False
    results = []
    may_read: dict = {}  # topic -> READ allowed (asked once per topic)
    for topic, fetch in wanted:
        allowed = may_read.get(topic)
        if allowed is None:
            allowed = may_read[topic] = ctx.allowed(Operation.READ, ResourceType.TOPIC, topic)
        if not allowed:
            results.append(
                (topic, PartitionResult(fetch.partition, ErrorCode.topic_authorization_failed)))
            errors = True
            continue
        result, size = _read_partition(broker, topic, fetch, budget - total, total == 0,
                                       committed)
        errors = errors or result.error_code != 0
        total += size
        results.append((topic, result))
    return results, total, errors


@handles(ApiKey.FETCH, MIN_VERSION, MAX_VERSION)
async def fetch(ctx: RequestContext, request) -> RawResponse:
    topics, forgotten = _named(ctx, request)
    session = ctx.broker.fetch_sessions.begin(
        getattr(request, "session_id", 0), getattr(request, "session_epoch", -1),
        topics, forgotten)
    if session.error != ErrorCode.none:
        return RawResponse(encode_fetch_body(ctx.api_version, [], error_code=session.error,
                                             session_id=session.session_id))
    deadline = trio.current_time() + request.max_wait.total_seconds()
    keys = ctx.broker.fetch_sessions.all_partitions(session)
    while True:
        results, total, errors = _read_all(ctx, request, session.to_read())
        if total >= request.min_bytes or errors or not keys:
            break
        if trio.current_time() >= deadline:
            break
        if not await ctx.broker.notifier.wait_any(keys, deadline):
            results, total, errors = _read_all(ctx, request, session.to_read())
            break
    return RawResponse(encode_fetch_body(ctx.api_version, _by_id(ctx, session.respond(results)),
                                         session_id=session.session_id))
