"""What the group leader knows of one member when it runs an assignor."""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.consumer_protocol import Subscription


@dataclass
class GroupMemberInfo:
    """What the group leader knows of one member when assigning."""

    member_id: str
    subscription: Subscription
    group_instance_id: str | None = None

    @property
    def sort_key(self) -> tuple:
        # Java's MemberInfo order: members with a group.instance.id first, by that id, then
        # by member id.
        if self.group_instance_id is not None:
            return (0, self.group_instance_id, self.member_id)
        return (1, "", self.member_id)
