"""InitProducerId (key 22): ids for idempotent and transactional producers.

Without a transactional id: a new producer gets a fresh id (the broker's
ProducerIdAllocator: unique across restarts) and epoch 0.  A producer that presents its
current id and epoch (KIP-360, v3+) gets the epoch bumped, or a new id when the epoch would
overflow.

With a transactional id (an empty one counts as none, as in Kafka), the transaction
coordinator (txn/) answers: the id's producer id with its epoch bumped, which fences every
older instance, after aborting a transaction the previous instance left open;
INVALID_TRANSACTION_TIMEOUT past ``transaction.max.timeout.ms``.
"""

from __future__ import annotations

import datetime
import logging

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode

from ..api import RequestContext, handles

log = logging.getLogger(__name__)

MAX_EPOCH = 32767


@handles(ApiKey.INIT_PRODUCER_ID, 0, 4)
async def init_producer_id(ctx: RequestContext, request) -> object:
    fields = dict(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                  producer_id=-1, producer_epoch=-1)
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if request.transactional_id:
        service = ctx.broker.transactions
        if not service.loaded:
            fields["error_code"] = ErrorCode.coordinator_load_in_progress
        else:
            timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
            error, pid, pepoch = await service.init_producer_id(
                request.transactional_id, timeout_ms, producer_id, epoch)
            fields.update(error_code=error, producer_id=pid, producer_epoch=pepoch)
        return build(ctx.response_class(), **fields)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        fields.update(producer_id=producer_id, producer_epoch=epoch + 1)
    else:
        fields.update(producer_id=ctx.broker.producer_ids.next_id(), producer_epoch=0)
    return build(ctx.response_class(), **fields)
