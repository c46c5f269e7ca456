"""Consumer groups and share groups (KIP-932) read and changed over the Kafka protocol, on
the client's public API: what ``databus groups`` prints and what the web console's group
pages and sink table show and do, from one home so the two never disagree.

A part, not a tool: it imports the client's package and protocol/ only (no tool, no
printing), so the console and the plugins may use it (no part imports ``databus.tools``).
Kafka's own AdminClient has these as describeConsumerGroups / listConsumerGroupOffsets /
alterConsumerGroupOffsets; we keep them here rather than in databus/client/ because they
are built from raw requests at the broker's newest version (``Session.request_up_to``) for
APIs the client's version table lacks (the share-group APIs, ListGroups' type filter).

* ``session.py``: ``Session`` (a client Cluster and the groups' coordinators), ``GroupsError``
* ``describe.py``: listing, a group's state, members and committed offsets (``GroupView``),
  ``describe --json``'s document, a share group's description and start offsets
* ``alter.py``: offset resets (``ResetRequest``: plan, then commit), deletes
"""

from .alter import (
    ResetRequest,
    delete_group,
    delete_share_offsets,
    execute_group_reset,
    plan_group_reset,
    plan_reset,
    reset_partitions,
)
from .describe import (
    GroupView,
    ProtocolMember,
    describe_share_group,
    group_document,
    is_share_group,
    list_group_states,
    load_group,
    load_share_offsets,
    share_dlq,
    share_offsets,
)
from .session import INACTIVE_STATES, GroupsError, Session, check

__all__ = [
    "INACTIVE_STATES", "GroupView", "GroupsError", "ProtocolMember", "ResetRequest", "Session",
    "check", "delete_group", "delete_share_offsets", "describe_share_group",
    "execute_group_reset", "group_document", "is_share_group", "list_group_states",
    "load_group", "load_share_offsets", "plan_group_reset", "plan_reset", "reset_partitions",
    "share_dlq", "share_offsets",
]
