"""What the two heartbeat-only group protocols share: consumer groups of KIP-848
(consumer_group.py) and share groups of KIP-932 (share/group_state.py).  Both have the
client pick its member id, join with member epoch 0, leave with -1, and take Kafka's
session timeout and heartbeat interval defaults (``group.consumer.*`` / ``group.share.*``).
"""

from __future__ import annotations

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # consumer groups: a static member leaving for a restart (KIP-345)

DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000
