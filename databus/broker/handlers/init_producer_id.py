"""InitProducerId (key 22): ids for idempotent producers (no transactions).

A new producer gets a fresh id (the broker's ProducerIdAllocator: unique across restarts) and epoch 0.
A producer that presents its current id and epoch (KIP-360, v3+) gets the epoch bumped, or a
new id when the epoch would overflow.  Transactional ids are refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: this broker has no transaction coordinator, and a
producer told so fails fast instead of retrying forever.
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
    if request.transactional_id is not None:
        log.info("refusing transactional id %r from %s: transactions are not supported",
                 request.transactional_id, ctx.client_host)
        fields["error_code"] = ErrorCode.transactional_id_authorization_failed
        return build(ctx.response_class(), **fields)
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        fields.update(producer_id=producer_id, producer_epoch=epoch + 1)
    else:
        fields.update(producer_id=ctx.broker.producer_ids.next_id(), producer_epoch=0)
    return build(ctx.response_class(), **fields)
