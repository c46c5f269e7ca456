"""A mixin for the sidecar's background services in tests: it notes the partitions taken
from a member (``class Watched(NotesRevoked, DelayService)``)."""

from __future__ import annotations


class NotesRevoked:
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.revoked: list = []

    async def _revoked(self, partitions) -> None:
        self.revoked += partitions
        await super()._revoked(partitions)  # type: ignore[misc]
