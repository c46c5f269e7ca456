"""DeleteRecords (21): move partitions' log start offsets forward (kafka-delete-records.sh,
``AdminClient.delete_records``).

Kafka's semantics: the offset must lie in [0, high watermark] (-1 means the high watermark)
or the partition gets OFFSET_OUT_OF_RANGE; an offset at or below the current start changes
nothing; a topic whose ``cleanup.policy`` lacks ``delete`` gets POLICY_VIOLATION.  The answer
per partition is the new log start offset ("low watermark").

Durability: a partition is answered only once its new start offset is in the
``log-start-offset-checkpoint`` on disk (after fsyncing the log up to it, so the checkpoint
never names an offset the log could lose), so a kill -9 right after the answer keeps it.
Kafka writes that checkpoint lazily; a user who just deleted records (e.g. personal data)
expects them to stay deleted.  Whole segments below the new start are unlinked by the next
retention run (storage/retention.py).
"""

from __future__ import annotations

import datetime
import logging

import trio

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode

from ..api import RequestContext, handles
from ..errors import error_code_for

log = logging.getLogger(__name__)


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    answers: dict[tuple[str, int], tuple[ErrorCode, int]] = {}
    moved: list[tuple[str, int, int]] = []
    for topic in request.topics:
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            plog = broker.get_log(*key)
            if plog is None:
                answers[key] = (ErrorCode.unknown_topic_or_partition, -1)
                continue
            before = plog.log_start_offset
            try:
                low = broker.log_manager.delete_records(topic.name, part.partition_index,
                                                        part.offset)
            except Exception as exc:  # noqa: BLE001  (answers this partition only)
                code = error_code_for(exc)
                if code is ErrorCode.unknown_server_error:
                    log.exception("DeleteRecords on %s-%d failed", *key)
                answers[key] = (code, -1)
                continue
            answers[key] = (ErrorCode.none, low)
            if low > before:
                broker.fetch_sessions.touch(key)  # its log start offset is news
                moved.append((topic.name, part.partition_index, low))
                log.info("DeleteRecords: %s-%d log start offset %d -> %d", *key, before, low)
    if moved:
        try:
            for name, index, low in moved:
                await broker.wait_durable(name, index, low - 1)
            await trio.to_thread.run_sync(broker.log_manager.write_checkpoints)
        except Exception as exc:  # noqa: BLE001  (every moved partition reports it)
            log.exception("DeleteRecords: making the log start offsets durable failed")
            for name, index, _low in moved:
                answers[(name, index)] = (error_code_for(exc), -1)
    topics = tuple(
        build(module.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(
            build(module.DeleteRecordsPartitionResult, partition_index=p.partition_index,
                  error_code=answers[(topic.name, p.partition_index)][0],
                  low_watermark=answers[(topic.name, p.partition_index)][1])
            for p in topic.partitions))
        for topic in request.topics
    )
    return build(ctx.response_class(), throttle_time=datetime.timedelta(0), topics=topics)
