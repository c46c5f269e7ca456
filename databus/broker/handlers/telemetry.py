"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71) and PushTelemetry (72).

librdkafka (2.5+) and the Java client ask the broker which metrics to push; the answer comes
from the client-metrics subscriptions operators make (CLIENT_METRICS config resources,
``databus client-metrics``), and what the clients push becomes Prometheus series on the
broker's ``--metrics-listen`` ``/metrics``.  The rules and the decoding are the pure
``broker/client_metrics/`` package; this module hands it the client's identity (client id,
the software name and version it gave in ApiVersions, its address and port) and the clock.
docs/client-metrics.md.
"""

from __future__ import annotations

import datetime
import logging

import trio

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode

from ..api import RequestContext, handles

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)


def _identity(ctx: RequestContext) -> dict[str, str]:
    return {
        "client_id": ctx.client_id or "",
        "client_software_name": ctx.session.client_software_name or "",
        "client_software_version": ctx.session.client_software_version or "",
        "client_source_address": ctx.client_host,
        "client_source_port": str(ctx.client_port),
    }


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
async def get_telemetry_subscriptions(ctx: RequestContext, request) -> object:
    answer = ctx.broker.client_metrics.get_subscriptions(
        request.client_instance_id, _identity(ctx), trio.current_time())
    return build(
        ctx.response_class(), throttle_time=NO_THROTTLE, error_code=answer.error,
        client_instance_id=answer.instance_id, subscription_id=answer.subscription_id,
        accepted_compression_types=answer.accepted_compression,
        push_interval=datetime.timedelta(milliseconds=answer.interval_ms),
        telemetry_max_bytes=answer.max_bytes, delta_temporality=answer.delta_temporality,
        requested_metrics=answer.metrics,
    )


@handles(ApiKey.PUSH_TELEMETRY, 0, 0)
async def push_telemetry(ctx: RequestContext, request) -> object:
    code, message = ctx.broker.client_metrics.push(
        request.client_instance_id, request.subscription_id, request.terminating,
        request.compression_type, request.metrics, _identity(ctx), trio.current_time())
    if code != ErrorCode.none:
        # counted in /metrics by error name; the reason (a client's bug, mostly) only here
        log.debug("PushTelemetry from %s (%s:%d): %s: %s", ctx.client_id,
                  ctx.client_host, ctx.client_port, code.name, message)
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, error_code=code)
