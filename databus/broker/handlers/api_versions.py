"""ApiVersions (key 18): the broker's API list, read from the broker's handler table.

What is advertised is exactly what the broker answers (see databus/broker/api.py).  A client that
asks with a version we do not support gets a v0-format body with UNSUPPORTED_VERSION and the
key list, so it can retry with a version we know (Kafka's KIP-511 behaviour); the response
header of ApiVersions never carries tagged fields (framing.py handles that).
"""

from __future__ import annotations

import datetime

from kio.schema.api_versions.v0 import response as v0_response
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta

from ..api import HandlerTable, RequestContext, handles

API_VERSIONS = 18
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def _api_list(module, table: HandlerTable) -> tuple:
    return tuple(
        module.ApiVersion(
            api_key=i16(reg.api_key), min_version=i16(reg.min_version),
            max_version=i16(reg.max_version),
        )
        for reg in table.values()
    )


def unsupported_version_response(table: HandlerTable) -> object:
    """The v0-format answer to an ApiVersions request of a version we do not support."""
    return v0_response.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version, api_keys=_api_list(v0_response, table)
    )


@handles(API_VERSIONS, 0, 3)
async def api_versions(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    fields = {"error_code": ErrorCode.none, "api_keys": _api_list(module, ctx.broker.handlers)}
    if ctx.api_version >= 1:
        fields["throttle_time"] = NO_THROTTLE
    return ctx.response_class()(**fields)
