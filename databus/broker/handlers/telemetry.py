"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71) and PushTelemetry (72).

Kafka 3.7+ clients (librdkafka 2.5+, the Java client) ask a broker that advertises these APIs
which metrics to push.  The broker collects none, so it answers every client with an empty
subscription: a client instance id (the client's own, or a new one when it sent the zero
UUID), subscription id 0, no requested metrics, so the client pushes nothing and only asks
again after ``push_interval`` (Kafka's default of 5 minutes).  A push that arrives anyway is
accepted and dropped, with Kafka's error for a subscription id it never handed out
(UNKNOWN_SUBSCRIPTION_ID) unless the client is terminating.
"""

from __future__ import annotations

import datetime
import uuid

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode

from ..api import RequestContext, handles

PUSH_INTERVAL = datetime.timedelta(minutes=5)  # Kafka's telemetry.push.interval.ms default
TELEMETRY_MAX_BYTES = 1024 * 1024
SUBSCRIPTION_ID = 0
ZERO_UUID = uuid.UUID(int=0)


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def get_telemetry_subscriptions(ctx: RequestContext, request) -> object:
    instance = request.client_instance_id
    if instance is None or instance == ZERO_UUID:
        instance = uuid.uuid4()
    return build(
        ctx.response_class(), throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
        client_instance_id=instance, subscription_id=SUBSCRIPTION_ID,
        accepted_compression_types=(), push_interval=PUSH_INTERVAL,
        telemetry_max_bytes=TELEMETRY_MAX_BYTES, delta_temporality=True, requested_metrics=(),
    )


@handles(ApiKey.PUSH_TELEMETRY, 0, 0)
async def push_telemetry(ctx: RequestContext, request) -> object:
    code = ErrorCode.none
    if request.subscription_id != SUBSCRIPTION_ID and not request.terminating:
        code = ErrorCode.unknown_subscription_id
    return build(ctx.response_class(), throttle_time=datetime.timedelta(0), error_code=code)
