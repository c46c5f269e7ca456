"""Kafka's error codes: the one table the project names them by.

The table is kio's ``ErrorCode`` (Kafka's codes under Kafka's names in snake case, with the
retriable flag of Kafka's ``Errors`` enum), re-exported here: the broker, the storage engine,
the client and the tools say ``ErrorCode.not_leader_or_follower``, never 6.
``error_name(code)`` is the upper-case name Kafka prints (``NOT_LEADER_OR_FOLLOWER``): the
client's exception names, the sidecar's metrics and the SDK's errors use it.

The app SDK must not import kio (an app pays for what it imports), so the sidecar wire
format names the few Kafka codes the sidecar itself sends in its own ``ErrorCode``
(databus/protocol/sidecar_wire.py); a test checks them against this table, and
``sidecar_wire.error_name`` comes here for every other code.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "error_name"]


def error_name(code: int) -> str:
    """Kafka's upper-case name for ``code``, ``UNKNOWN_<code>`` for a code Kafka lacks."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"
