"""Produce (key 0): append the stored batches untouched, answer per partition.

- acks=0: nothing is sent back; acks=1: answered after the append; acks=-1 (all): answered
  after an fsync covers the batch (group commit, single-node durability: see durability.py).
  Any other acks value is INVALID_REQUIRED_ACKS for every partition.  Internal topics
  (``__`` prefix) are written only by the broker: INVALID_TOPIC_EXCEPTION.
- The batches are checked and appended by the storage engine (magic, CRC, size, idempotent
  producer sequence/epoch); its errors become per-partition error codes
  (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, OUT_OF_ORDER_SEQUENCE_NUMBER, ...) and nothing of a
  rejected batch is appended.  A duplicate idempotent batch gets its original offsets.
- A compacted topic (``cleanup.policy`` containing compact) refuses records without a key, as
  Kafka's LogValidator does: INVALID_RECORD for the partition, ``error_message`` set, and
  (v8+, KIP-467) ``record_errors`` listing each keyless record's batch index with its
  message, so the producer fails those records with the reason and the rest of the batch as
  collateral.  Only compacted topics have their records decoded on produce, and topics
  with Confluent Server's ``confluent.{key,value}.schema.validation=true``: a record whose
  value (key) lacks the magic byte, names an unknown schema id, or one not registered under
  the topic's subject refuses the batch the same way (docs/schemas.md).
- v11-13 (Kafka 4.0/4.1): v12 is transactions v2 (KIP-890): a transactional batch's
  partition joins its transaction here, before the append (the coordinator's
  ``add_partitions``, one state write for all the request's new partitions), so the client
  sends no AddPartitionsToTxn; a producer whose epoch the coordinator no longer knows gets
  INVALID_PRODUCER_EPOCH and nothing is appended (a zombie of a finished transaction), a
  coordinator busy ending the transaction NOT_ENOUGH_REPLICAS (retriable, as Kafka maps
  it).  Before v12 transactional batches are appended as the client added them (v1).  v13 names
  topics by id (KIP-516): an id the broker does not know is UNKNOWN_TOPIC_ID for each of its
  partitions, and the answer carries the ids back.
- Produce is advertised from v0 (librdkafka before 2.11.1 stops compressing when a broker's
  minimum is 3), but only record format v2 is stored: v0-2, which kio has no schema for, are
  answered with UNSUPPORTED_VERSION (``_answer_legacy``; protocol/legacy_produce.py
  reads and writes their layouts).
"""

from __future__ import annotations

import datetime
import logging
import time

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.legacy_produce import legacy_produce_error_body, parse_legacy_produce
from databus.service import latency_trace
from databus.storage.acls import Operation, ResourceType

from ..api import Deferred, RawResponse, RequestContext, handles
from ..broker import is_internal_topic
from ..errors import error_code_for

log = logging.getLogger(__name__)

NO_TIME = None  # encodes as -1: the topic uses CreateTime


def _append_time(info) -> datetime.datetime | None:
    ts = getattr(info, "log_append_time", -1)
    if ts is None or ts < 0:
        return NO_TIME
    return datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC)


# What the coordinator's refusal of an implicit join becomes in a Produce answer (Kafka's
# ReplicaManager mapping: every producer knows these).
_JOIN_ERRORS = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
}


async def _join_transaction(ctx: RequestContext, request) -> dict:
    """Produce v12+ (KIP-890): add the partitions of the request's transactional batches to
    their transaction; {(topic, partition): error} for those that may not be appended."""
    from databus.protocol.records import CorruptRecordError, parse_header

    txn_id = getattr(request, "transactional_id", None)
    service = ctx.broker.transactions
    if not txn_id or not service.loaded:
        return {}
    producer = None
    wanted = []
    for topic in request.topic_data:
        name = getattr(topic, "name", None)
        if name is None or ctx.broker.topic(name) is None:
            continue  # the append names the problem
        for pdata in topic.partition_data:
            try:
                h = parse_header(pdata.records or b"")
            except CorruptRecordError:
                continue
            if h.is_transactional:
                producer = (h.producer_id, h.producer_epoch)
                wanted.append((name, pdata.index))
    if not wanted:
        return {}
    error = await service.add_partitions(txn_id, producer[0], producer[1], wanted)
    if error == ErrorCode.none:
        return {}
    code = _JOIN_ERRORS.get(error, error)
    return {key: code for key in wanted}


def _append_all(ctx: RequestContext, request, refused: dict | None = None) -> list:
    """Append every partition's records (not those ``refused``: {(topic, partition):
    code}); [(topic, [(index, info | None, code, message, record_errors)])]."""
    refused = refused or {}
    broker = ctx.broker
    results = []
    valid_acks = request.acks in (0, 1, -1)
    # Kafka: transactional records need WRITE on their transactional id, else every
    # partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended.
    txn_id = getattr(request, "transactional_id", None)
    txn_refused = bool(txn_id) and not ctx.allowed(Operation.WRITE,
                                                  ResourceType.TRANSACTIONAL_ID, txn_id)
    names_by_id = None
    for topic in request.topic_data:
        partitions = []
        name = getattr(topic, "name", None)
        if name is None:  # v13+: the topic by id
            if names_by_id is None:
                names_by_id = {info.topic_id: n for n, info in broker.log_manager.topics().items()}
            name = names_by_id.get(topic.topic_id)
        may_write = name is not None and ctx.allowed(Operation.WRITE, ResourceType.TOPIC, name)
        for pdata in topic.partition_data:
            info, code, message, record_errors = None, ErrorCode.none, None, ()
            if not valid_acks:
                code = ErrorCode.invalid_required_acks
            elif name is None:
                code, message = ErrorCode.unknown_topic_id, f"unknown topic id {topic.topic_id}"
            elif txn_refused:
                code = ErrorCode.transactional_id_authorization_failed
            elif not may_write:
                code = ErrorCode.topic_authorization_failed
            elif is_internal_topic(name):
                # only the broker writes internal topics (the group coordinator appends to
                # __consumer_offsets through Broker.append, not through Produce)
                code = ErrorCode.invalid_topic_exception
                message = f"{name} is an internal topic: clients cannot produce to it"
            elif pdata.records is None:
                code, message = ErrorCode.corrupt_message, "null records"
            elif (name, pdata.index) in refused:
                code = refused[(name, pdata.index)]
                message = "the transaction coordinator refused this partition's join"
            elif (problems := _schema_problems(broker, name, pdata.records)) is not None:
                # its own name: reusing ``refused`` here once lost the join refusals for
                # the request's later partitions (a TypeError that closed the connection)
                code, message, record_errors = ErrorCode.invalid_record, *problems
            else:
                try:
                    info = broker.append(name, pdata.index, pdata.records)
                except Exception as exc:
                    code, message = error_code_for(exc), str(exc)
                    record_errors = getattr(exc, "record_errors", ())
                    if code is ErrorCode.unknown_server_error:
                        log.exception("append to %s-%d failed", name, pdata.index)
            partitions.append((pdata.index, info, code, message, record_errors))
        results.append(((name, getattr(topic, "topic_id", None)), partitions))
    return results


def _schema_problems(broker, topic: str, records) -> tuple[str, list] | None:
    """Confluent Server's broker-side schema validation (databus/schemas/validation.py), for
    a topic that turns it on: (message, record errors) when records are refused, else None.
    On with no registry in this broker, every batch is refused: nothing unchecked lands."""
    try:
        config = broker.log_manager.topic_config(topic)
    except Exception:
        return None  # an unknown topic: the append reports it
    if not (config.confluent_value_schema_validation or config.confluent_key_schema_validation):
        return None
    validator = broker.schema_validator
    if validator is None:
        return (f"topic {topic} has schema validation on but this broker serves no schema "
                "registry (schema.registry.listen)", [])
    try:
        problems = validator.problems(topic, records, config)
    except Exception as exc:  # a corrupt batch: the append names it
        log.debug("schema validation of %s skipped: %s", topic, exc)
        return None
    if not problems:
        return None
    return (f"{len(problems)} record(s) refused by schema validation; first: "
            f"{problems[0][1]}", problems)


def _record_errors(module, record_errors) -> tuple:
    """KIP-467 per-record errors; versions before 8 have no field for them."""
    entry = getattr(module, "BatchIndexAndErrorMessage", None)
    if entry is None:
        return ()
    return tuple(build(entry, batch_index=index, batch_index_error_message=text)
                 for index, text in record_errors)


def _response(ctx: RequestContext, results, failed: dict | None = None) -> object:
    module = ctx.response_module()
    failed = failed or {}
    topics = []
    for (name, topic_id), partitions in results:
        entries = []
        for index, info, code, message, record_errors in partitions:
            failure = failed.get((name, index))
            if failure is not None:
                info, code, message = None, failure[0], failure[1]
            entries.append(
                build(
                    module.PartitionProduceResponse,
                    index=index, error_code=code,
                    base_offset=info.first_offset if info is not None else -1,
                    log_append_time=_append_time(info) if info is not None else NO_TIME,
                    log_start_offset=info.log_start_offset if info is not None else -1,
                    record_errors=_record_errors(module, record_errors),
                    error_message=message,
                )
            )
        topics.append(build(module.TopicProduceResponse, name=name, topic_id=topic_id,
                            partition_responses=tuple(entries)))
    return build(ctx.response_class(), responses=tuple(topics),
                 throttle_time=datetime.timedelta(0))


@handles(ApiKey.PRODUCE, 0, 13)
async def produce(ctx: RequestContext, request) -> object:
    if request is None:
        return _answer_legacy(ctx)
    started = time.perf_counter() if _trace is not None else 0.0
    refused = await _join_transaction(ctx, request) if ctx.api_version >= 12 else None
    results = _append_all(ctx, request, refused)
    if _trace is not None:
        appended = time.perf_counter()
    if request.acks != -1:
        if _trace is not None:
            _write_trace(results, started, appended, {}, appended)
        return None if request.acks == 0 else _response(ctx, results)

    # The fsync is asked for now, for every partition at once: registered only when the
    # writer reaches this answer (or one partition after another), a waiter would miss the
    # round already running and wait for one more fsync.
    failed = {}
    waiters = []
    for (name, _topic_id), partitions in results:
        for index, info, *_failure in partitions:
            if info is None:
                continue
            try:
                waiter = ctx.broker.durable_waiter(name, index, info.last_offset)
            except Exception as exc:
                failed[(name, index)] = (error_code_for(exc), str(exc))
                continue
            if waiter is not None:
                waiters.append(((name, index), waiter))

    async def after_fsync():
        for key, waiter in waiters:
            try:
                await waiter.wait()
            except Exception as exc:
                failed[key] = (error_code_for(exc), str(exc))
        if _trace is not None:
            _write_trace(results, started, appended, dict(waiters), time.perf_counter())
        return _response(ctx, results, failed)

    return Deferred(after_fsync)


_trace = latency_trace.recorder("broker")


def _write_trace(results, started, appended, waiters, answered) -> None:
    """One latency-trace line per appended batch (see databus/service/latency_trace.py)."""
    for (name, _topic_id), partitions in results:
        for index, info, *_failure in partitions:
            if info is not None:
                waiter = waiters.get((name, index))
                _trace.write(name, index, info.first_offset, info.last_offset, started,
                             appended, waiter and waiter.round_start,
                             waiter and waiter.round_end, answered)


# -- Produce v0-2 (message format v0/v1): refused -----------------------------------------


def _answer_legacy(ctx: RequestContext) -> RawResponse | None:
    """UNSUPPORTED_VERSION for every partition (protocol/legacy_produce.py reads and writes
    the v0-2 layouts kio has no schema for)."""
    request = parse_legacy_produce(ctx.frame)
    log.info("refusing produce v%d from %s: only record format v2 (produce v3+) is stored",
             ctx.api_version, ctx.client_host)
    if request.acks == 0:
        return None
    return RawResponse([legacy_produce_error_body(ctx.api_version, request)])
