"""ApiVersions (key 18): the broker's API list, read from the broker's handler table.

What is advertised is exactly what the broker answers (see databus/broker/api.py).  A client that
asks with a version we do not support gets a v0-format body with UNSUPPORTED_VERSION and the
key list, so it can retry with a version we know (Kafka's KIP-511 behaviour); the response
header of ApiVersions never carries tagged fields (framing.py handles that).
"""

from __future__ import annotations

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import response_schema

from ..api import HandlerTable, RequestContext, handles


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
    return build(
        ctx.response_class(), error_code=ErrorCode.none, api_keys=_api_keys(ctx.handlers), throttle_time=0
    )
