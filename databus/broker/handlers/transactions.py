"""Transaction APIs (KIP-98): AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
WriteTxnMarkers.  InitProducerId with a transactional id is in init_producer_id.py.

Thin translations between kio messages and txn/service.py (the broker's ``transactions``),
where the transaction coordinator lives; the transactional offset commits themselves are kept
by the group service.  This broker is the coordinator of every transactional id
(FindCoordinator key type 1 names it).

- AddPartitionsToTxn v0-3 (the client's form; v4+ batches several transactions for brokers
  and is not advertised): a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION and
  the others of the request OPERATION_NOT_ATTEMPTED, as in Kafka; otherwise every partition
  gets the coordinator's answer.
- ACLs, as Kafka checks them: WRITE on the transactional id for all of them
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE per topic for AddPartitionsToTxn, READ on
  the group (AddOffsetsToTxn, TxnOffsetCommit) and READ per topic (TxnOffsetCommit);
  WriteTxnMarkers needs CLUSTER_ACTION on the cluster.  AddOffsetsToTxn and EndTxn are
  refused before their handler (authorizer.REQUEST_CHECKS).
- WriteTxnMarkers v1: Kafka's coordinator sends it to partition leaders; here the
  coordinator writes its markers in-process, but the API is served (an admin tool may use
  it to close a hanging transaction): each marker is appended to each partition.
"""

from __future__ import annotations

from databus.broker.coordinator.service import OffsetCommitEntry
from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.consumer_offsets import OFFSETS_TOPIC
from databus.protocol.records import CONTROL_ABORT, CONTROL_COMMIT
from databus.storage.acls import Operation, ResourceType

from ..api import RequestContext, handles
from ..authorizer import partition_errors
from ..errors import error_code_for
from .groups import groups_of


def transactions_of(ctx: RequestContext):
    """The broker's transaction coordinator, or None until it has replayed its log."""
    service = ctx.broker.transactions
    return service if service.loaded else None


def _response(ctx: RequestContext, **values):
    values.setdefault("throttle_time", 0)
    return build(ctx.response_class(), values)


# -- AddPartitionsToTxn ---------------------------------------------------------------------


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3)
async def add_partitions_to_txn(ctx: RequestContext, request):
    txn_id = request.v3_and_below_transactional_id
    topics = [(t.name, list(t.partitions)) for t in request.v3_and_below_topics]
    wanted = [(name, p) for name, parts in topics for p in parts]
    service = transactions_of(ctx)
    refused = {}
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        error = ErrorCode.transactional_id_authorization_failed
    else:
        # Kafka: a topic the producer may not WRITE is TOPIC_AUTHORIZATION_FAILED, a
        # partition that does not exist UNKNOWN_TOPIC_OR_PARTITION, and then the others of
        # the request OPERATION_NOT_ATTEMPTED (nothing is added).
        refused = partition_errors(ctx, wanted, Operation.WRITE, exists=lambda name, p: (
            (info := ctx.broker.topic(name)) is not None and 0 <= p < info.partitions))
        if service is None:
            error = ErrorCode.coordinator_load_in_progress
        elif refused:
            error = ErrorCode.operation_not_attempted
        else:
            error = await service.add_partitions(
                txn_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, wanted)
    results = [
        {"name": name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": refused.get((name, p), error)}
            for p in parts]}
        for name, parts in topics
    ]
    return _response(ctx, results_by_topic_v3_and_below=results)


# -- AddOffsetsToTxn ------------------------------------------------------------------------


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3)
async def add_offsets_to_txn(ctx: RequestContext, request):
    service = transactions_of(ctx)
    groups = groups_of(ctx)
    if service is None or groups is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress)
    if not request.group_id:
        return _response(ctx, error_code=ErrorCode.invalid_group_id)
    # Kafka adds the group's __consumer_offsets partition to the transaction: the commit
    # marker written there is what makes the transaction's offset commits visible.
    partition = (OFFSETS_TOPIC, groups.partition_of(request.group_id))
    error = await service.add_partitions(request.transactional_id, request.producer_id,
                                         request.producer_epoch, [partition])
    return _response(ctx, error_code=error)


# -- EndTxn ---------------------------------------------------------------------------------


@handles(ApiKey.END_TXN, 0, 3)
async def end_txn(ctx: RequestContext, request):
    service = transactions_of(ctx)
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress)
    error = await service.end_txn(request.transactional_id, request.producer_id,
                                  request.producer_epoch, bool(request.committed))
    return _response(ctx, error_code=error)


# -- TxnOffsetCommit ------------------------------------------------------------------------


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 3)
async def txn_offset_commit(ctx: RequestContext, request):
    entries = [
        OffsetCommitEntry(topic=topic.name, partition=p.partition_index,
                          offset=p.committed_offset,
                          leader_epoch=getattr(p, "committed_leader_epoch", -1),
                          metadata=p.committed_metadata)
        for topic in request.topics for p in topic.partitions
    ]
    service = transactions_of(ctx)
    groups = groups_of(ctx)
    refused = {}
    # Kafka's order: WRITE on the transactional id, READ on the group (each refuses the
    # whole request), READ per topic (refuses those partitions; the others are committed).
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        errors = [ErrorCode.transactional_id_authorization_failed] * len(entries)
    elif not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        errors = [ErrorCode.group_authorization_failed] * len(entries)
    elif service is None or groups is None:
        errors = [ErrorCode.coordinator_load_in_progress] * len(entries)
    else:
        refused = partition_errors(ctx, [(e.topic, e.partition) for e in entries],
                                   Operation.READ)
        allowed = [e for e in entries if (e.topic, e.partition) not in refused]
        error = service.coordinator.check_offset_commit(
            request.transactional_id, request.producer_id, request.producer_epoch,
            (OFFSETS_TOPIC, groups.partition_of(request.group_id)))
        if error != ErrorCode.none:
            done = [error] * len(allowed)
        elif allowed:
            done = await groups.commit_txn_offsets(
                request.group_id, request.producer_id, request.producer_epoch,
                getattr(request, "member_id", ""), getattr(request, "generation_id", -1),
                allowed)
        else:
            done = []
        answered = dict(zip(((e.topic, e.partition) for e in allowed), done))
        keys = [(e.topic, e.partition) for e in entries]
        errors = [refused[k] if k in refused else answered[k] for k in keys]
    topics: dict[str, list] = {}
    for entry, error in zip(entries, errors):
        topics.setdefault(entry.topic, []).append(
            {"partition_index": entry.partition, "error_code": error})
    return _response(ctx, topics=[{"name": n, "partitions": parts}
                                  for n, parts in topics.items()])


# -- WriteTxnMarkers ------------------------------------------------------------------------


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, request):
    service = ctx.broker.transactions
    # Kafka: only brokers (CLUSTER_ACTION on the cluster) write markers; anyone else gets
    # CLUSTER_AUTHORIZATION_FAILED for every partition, and nothing is written.
    allowed = ctx.cluster_allowed(Operation.CLUSTER_ACTION)
    markers = []
    for marker in request.markers:
        kind = CONTROL_COMMIT if marker.transaction_result else CONTROL_ABORT
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                if not allowed:
                    partitions.append({"partition_index": index,
                                       "error_code": ErrorCode.cluster_authorization_failed})
                    continue
                error = ErrorCode.none
                try:
                    last = service.write_marker(topic.name, index, marker.producer_id,
                                                marker.producer_epoch, kind,
                                                marker.coordinator_epoch)
                    if last is None:
                        error = ErrorCode.unknown_topic_or_partition
                    else:
                        await ctx.broker.wait_durable(topic.name, index, last)
                except Exception as exc:
                    error = error_code_for(exc)
                partitions.append({"partition_index": index, "error_code": error})
            topics.append({"name": topic.name, "partitions": partitions})
        markers.append({"producer_id": marker.producer_id, "topics": topics})
    return build(ctx.response_class(), markers=markers)
