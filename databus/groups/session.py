"""A client Cluster with what group requests need: the groups' coordinators (FindCoordinator,
asked once per group) and requests at the broker's newest version of an API the client's
own version table stops short of or lacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from databus.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from databus.client import Cluster

# Groups in these states have no members: their offsets may be reset, they may be deleted.
INACTIVE_STATES = ("Empty", "Dead")


class GroupsError(Exception):
    """A refusal or failure about a group, said in one line (the broker's error named)."""


@dataclass
class Session:
    """A client Cluster plus the group coordinator's node id."""

    cluster: Cluster
    timeout: float
    coordinators: dict[str, int] = field(default_factory=dict)
    addresses: dict[int, str] = field(default_factory=dict)  # node id -> "host:port"

    async def request(self, node_id, api_key: int, fields: dict):
        return await self.cluster.request(node_id, api_key, fields)

    async def request_up_to(self, node_id, api_key: int, highest: int, fields: dict):
        """At the broker's newest version of ``api_key`` up to ``highest``: for what the
        client's own version table stops short of (ListGroups' type filter, v5) or lacks
        (the share-group APIs)."""
        from databus.protocol.entities import build_request

        cluster = self.cluster
        conn = await (cluster.any_connection() if node_id is None
                      else cluster.connection(node_id))
        versions = conn.broker_versions.get(int(api_key))
        if versions is None or versions[0] > highest:
            raise GroupsError(f"the broker does not serve {ApiKey(api_key).name} "
                              f"(versions up to {highest} needed)")
        return await conn.send_body(build_request(api_key, min(versions[1], highest), fields))

    async def coordinator(self, group: str) -> int:
        if group not in self.coordinators:
            response = await self.request(None, ApiKey.FIND_COORDINATOR,
                                          {"key": group, "key_type": 0,
                                           "coordinator_keys": [group]})
            check(response.error_code, f"finding the coordinator of {group!r}")
            self.cluster.register_address(response.node_id, response.host, response.port)
            self.coordinators[group] = response.node_id
            self.addresses[response.node_id] = f"{response.host}:{response.port}"
        return self.coordinators[group]


def check(error_code, what: str) -> None:
    """Raise GroupsError naming ``what`` and Kafka's error name unless ``error_code`` is 0."""
    from databus.protocol.errors import error_name

    code = int(error_code)
    if code != 0:
        raise GroupsError(f"{what}: {error_name(code)}")
