"""Per-app tokens (``sidecar.tokens``): which app may send to which streams.

    sidecar:
      tokens:
        billing:                                # the app's name (logs)
          token: ${env:BILLING_SIDECAR_TOKEN}   # or ${file:/run/secrets/billing}
          streams: ["billing\\..*", "audit"]    # regexes, whole stream name

With tokens configured, an app's hello must carry one of them (``databus.Client(token=...)``
or $DATABUS_TOKEN): a missing or unknown token gets an UNAUTHORIZED error frame and the
connection is closed; a message to a stream its token does not list is answered with
STREAM_NOT_ALLOWED (the others of the frame go on).  Without ``tokens`` every app on the
socket may send anywhere (the socket's mode and group are the boundary).  Tokens are
compared in constant time and never logged.  Plain code, no I/O.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

from databus.protocol.sidecar_wire import ErrorCode, WireError


@dataclass(frozen=True)
class AppAccess:
    app: str
    patterns: tuple[re.Pattern, ...]

    def allows(self, stream: str) -> bool:
        return any(p.fullmatch(stream) for p in self.patterns)


class TokenCheck:
    """``check(token)``: the AppAccess of the app holding ``token``; WireError if none."""

    def __init__(self, tokens: Mapping[str, tuple[str, list[str]]]) -> None:
        # app -> (resolved token, stream regexes)
        self._apps = [(token.encode(), AppAccess(app, tuple(re.compile(p) for p in streams)))
                      for app, (token, streams) in tokens.items()]

    def __call__(self, token) -> AppAccess:
        if not isinstance(token, str) or not token:
            raise WireError(ErrorCode.UNAUTHORIZED,
                            "this sidecar needs a token in the hello (sidecar.tokens)")
        given = token.encode()
        found = None
        for expected, access in self._apps:  # every one compared: no timing hint
            if hmac.compare_digest(given, expected):
                found = access
        if found is None:
            raise WireError(ErrorCode.UNAUTHORIZED, "unknown token")
        return found
