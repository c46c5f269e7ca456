"""Bounds on what clients can make a server hold: the broker (Kafka's setting names) and
the sidecar (the same bounds under sidecar.yaml keys).

- ``queued.max.request.bytes``: bytes reserved for requests being received, all connections
  together (the sidecar's ``queued_max_frame_bytes``).  A connection reserves a request's
  whole size when its size prefix arrives and reads the rest only once the reservation fits
  (Kafka's MemoryPool), so eight attackers each sending 80 MB of a 90 MB request hold at
  most this much, and a reserved request can always complete.  One request larger than the limit still goes when nothing else is
  reserved, or it never could.
- ``max.connections`` / ``max.connections.per.ip``: one more connection is closed at once.

Refusals are logged at most once a minute each, with the count since the last line, so an
attacker cannot flood the log.
"""

from __future__ import annotations

import logging
from collections import Counter

import trio

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0


class RequestMemory:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lot = trio.lowlevel.ParkingLot()

    async def reserve(self, size: int) -> None:
        while self.used and self.used + size > self.limit:
            await self._lot.park()
        self.used += size

    def release(self, size: int) -> None:
        if size:
            self.used -= size
            self._lot.unpark_all()


class ConnectionLimits:
    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        self._refused = 0
        self._last_log = -LOG_EVERY_S

    def admit(self, host: str, peer: str) -> bool:
        """Count a new connection in; False (and a rate-limited WARNING) if over a limit."""
        if self.total >= self.max_connections:
            reason = f"max.connections={self.max_connections} reached"
        elif self.per_ip[host] >= self.max_per_ip:
            reason = f"max.connections.per.ip={self.max_per_ip} reached for {host}"
        else:
            self.total += 1
            self.per_ip[host] += 1
            return True
        self._refused += 1
        now = trio.current_time()
        if now - self._last_log >= LOG_EVERY_S:
            log.warning("closing connection from %s: %s (%d refused since the last such line)",
                        peer, reason, self._refused)
            self._last_log, self._refused = now, 0
        return False

    def release(self, host: str) -> None:
        self.total -= 1
        self.per_ip[host] -= 1
        if not self.per_ip[host]:
            del self.per_ip[host]
