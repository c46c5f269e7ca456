"""ApiVersions (key 18): the broker's API list, read from the broker's handler table.

What is advertised is exactly what the broker answers (see databus/broker/api.py).  A client that
asks with a version we do not support gets a v0-format body with UNSUPPORTED_VERSION and the
key list, so it can retry with a version we know (Kafka's KIP-511 behaviour); the response
header of ApiVersions never carries tagged fields (framing.py handles that).  v3+ carries the
features (KIP-584): ``transaction.version`` supported 0-2, finalized at the broker's
``transaction.version`` (default 2: transactions v2, KIP-890); ``share.version`` supported 0-2,
finalized at the broker's ``share.version`` (default 2: share groups, KIP-932, with their
dead-letter topics, KIP-1191), which is how a client (the sidecar's queue mode) learns it
may leave dead letters to the broker.
"""

from __future__ import annotations

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import response_schema
from databus.protocol.share_dlq import SHARE_VERSION, SHARE_VERSION_DLQ

from ..api import HandlerTable, RequestContext, handles

TRANSACTION_VERSION = "transaction.version"
MAX_TRANSACTION_VERSION = 2
FEATURES_EPOCH = 1  # the features never change while the broker runs (-1 would say "none")


def _api_keys(table: HandlerTable) -> list[dict]:
    return [
        {"api_key": reg.api_key, "min_version": reg.min_version, "max_version": reg.max_version}
        for reg in table.values()
    ]


def unsupported_version_response(table: HandlerTable) -> object:
    """The v0-format answer to an ApiVersions request of a version we do not support."""
    return build(
        response_schema(ApiKey.API_VERSIONS, 0),
        error_code=ErrorCode.unsupported_version, api_keys=_api_keys(table),
    )


@handles(ApiKey.API_VERSIONS, 0, 3)
async def api_versions(ctx: RequestContext, request) -> object:
    if ctx.api_version >= 3:  # remembered for client-metrics subscriptions (KIP-714)
        ctx.session.client_software_name = request.client_software_name
        ctx.session.client_software_version = request.client_software_version
    # KIP-584 features (v3+): transaction.version (KIP-890), share.version (KIP-932/1191).
    level = ctx.broker.config.transaction_version
    share = ctx.broker.config.share_version
    return build(
        ctx.response_class(), error_code=ErrorCode.none, api_keys=_api_keys(ctx.handlers),
        throttle_time=0,
        supported_features=[{"name": TRANSACTION_VERSION, "min_version": 0,
                             "max_version": MAX_TRANSACTION_VERSION},
                            {"name": SHARE_VERSION, "min_version": 0,
                             "max_version": SHARE_VERSION_DLQ}],
        finalized_features_epoch=FEATURES_EPOCH,
        finalized_features=[{"name": TRANSACTION_VERSION, "max_version_level": level,
                             "min_version_level": level},
                            {"name": SHARE_VERSION, "max_version_level": share,
                             "min_version_level": share}],
    )
