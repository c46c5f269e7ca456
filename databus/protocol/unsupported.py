"""Answers for requests the broker does not handle: UNSUPPORTED_VERSION instead of silence.

Every request gets a response, an error or a bounded wait, never a hang.  For an API key and
version that kio has a response schema for, we build that response with every error code
set to UNSUPPORTED_VERSION and everything else empty/zero (``error_response``); a client
that decodes it sees a clean error.  For a key or version nobody has a schema for, the body
is just the int16 error code (``bare_error_body``): the correlation id still matches, so a
pipelining client is not left waiting.  ApiVersions itself is special
(databus/broker/handlers/api_versions.py).
"""

from __future__ import annotations

import struct
from functools import cache

from .entities import error_entity
from .errors import ErrorCode
from .framing import response_schema


@cache
def error_response(api_key: int, version: int, code: ErrorCode = ErrorCode.unsupported_version):
    """A kio response of this key/version carrying ``code``; LookupError if kio lacks one."""
    try:
        schema = response_schema(api_key, version)
    except Exception:
        raise LookupError(f"no response schema for api key {api_key} v{version}") from None
    return error_entity(schema, code)


def bare_error_body(code: ErrorCode = ErrorCode.unsupported_version) -> bytes:
    return struct.pack(">h", int(code))
