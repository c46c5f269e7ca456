"""ACLs with Kafka's enums and matching rules, and their durable store.

An ``AclBinding`` is (resource type, resource name, pattern type) + (principal, host,
operation, permission), Kafka's ``AclBinding``.  ``AclStore`` keeps the bindings durably in
``<log.dirs>/acls.json`` (written whole to a temporary file, fsynced and renamed over the old
one: a crash leaves the old set or the new one, never half); the broker reads it, and so does
``databus acls --data-dir`` while the broker is stopped.  The broker's authorizer
(broker/authorizer.py) decides one request on one resource as Kafka's StandardAuthorizer:

1. no authorizer configured (``authorizer.class.name`` empty): everything is allowed;
2. a ``super.users`` principal is allowed everything;
3. a matching DENY (same operation or ALL) refuses, whatever allows;
4. a matching ALLOW allows; DESCRIBE is implied by READ, WRITE, DELETE and ALTER, and
   DESCRIBE_CONFIGS by ALTER_CONFIGS;
5. a resource no ACL matches at all is allowed only with ``allow.everyone.if.no.acl.found``.

Matching: a LITERAL binding matches its exact name (``*`` matches every name); a PREFIXED
one every name that starts with it; a principal of ``User:*`` and a host of ``*`` match all.
Plain data in, data out (no trio, no sockets), tested on its own.
"""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .durable import atomic_write

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name, as in Kafka
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"
ACL_FILE = "acls.json"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's implied operations: allowing any of these allows the key too.
IMPLIED_BY = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


# Kafka's AclEntry.supportedOperations: what an ACL on each resource type can name (ALL too).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                           Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


class AclError(ValueError):
    """An ACL or filter that cannot be stored or used; the message names the problem."""


def parse_enum(cls: type[enum.IntEnum], text: str | int, what: str) -> enum.IntEnum:
    """``"prefixed"``, ``"PREFIXED"``, ``"describe-configs"`` or the number -> the member."""
    if isinstance(text, int):
        return cls(text)
    name = text.strip().upper().replace("-", "_")
    if name == "TRANSACTIONALID":
        name = "TRANSACTIONAL_ID"
    try:
        return cls[name]
    except KeyError:
        known = ", ".join(m.name for m in cls if m.name not in ("UNKNOWN",))
        raise AclError(f"unknown {what} {text!r} (known: {known})") from None


def check_principal(principal: str) -> str:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
    return principal


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        """Refuse what Kafka refuses: filter-only values (ANY, MATCH, UNKNOWN) in a binding."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError("an ACL needs a concrete resource type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("an ACL's pattern type is LITERAL or PREFIXED")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError("an ACL needs a concrete operation")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError("an ACL's permission is ALLOW or DENY")
        if not self.resource_name:
            raise AclError("an ACL needs a resource name")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        check_principal(self.principal)
        if not self.host:
            raise AclError("an ACL needs a host (* for any)")
        return self

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def to_json(self) -> dict:
        return {key: (value.name if isinstance(value, enum.Enum) else value)
                for key, value in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> AclBinding:
        return cls(ResourceType[data["resource_type"]], data["resource_name"],
                   PatternType[data["pattern_type"]], data["principal"], data["host"],
                   Operation[data["operation"]], Permission[data["permission"]])


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select by: None matches anything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        for value, what in ((self.resource_type, "resource type"),
                            (self.pattern_type, "pattern type"), (self.operation, "operation"),
                            (self.permission, "permission type")):
            if value == 0:
                raise AclError(f"a filter's {what} may not be UNKNOWN")
        return self

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            # the ACLs that would apply to this name (literal, wildcard or prefix)
            if self.resource_name is not None and not acl.matches_resource(
                    acl.resource_type, self.resource_name):
                return False
        else:
            if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
                return False
            if self.resource_name is not None and self.resource_name != acl.resource_name:
                return False
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


class AclStore:
    """The ACL bindings of a broker, in memory and in ``<dir>/acls.json``."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / ACL_FILE
        self._acls: set[AclBinding] = set()
        self._lock = threading.Lock()  # the CLI's offline mode and tests share no loop

    def load(self) -> AclStore:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return self
        except (OSError, ValueError) as exc:
            raise AclError(f"cannot read {self.path}: {exc}") from None
        self._acls = {AclBinding.from_json(item) for item in data.get("acls", [])}
        return self

    def _save(self) -> None:

        document = {"version": 1, "acls": [acl.to_json() for acl in sorted(self._acls)]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, (json.dumps(document, indent=1) + "\n").encode())

    def all(self) -> list[AclBinding]:
        return sorted(self._acls)

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [acl for acl in sorted(self._acls) if acl_filter.matches(acl)]

    def add(self, bindings: Iterable[AclBinding]) -> None:
        with self._lock:
            before = set(self._acls)
            self._acls.update(binding.validate() for binding in bindings)
            if self._acls != before:
                self._save()

    def delete(self, acl_filter: AclFilter) -> list[AclBinding]:
        with self._lock:
            gone = [acl for acl in sorted(self._acls) if acl_filter.matches(acl)]
            if gone:
                self._acls.difference_update(gone)
                self._save()
            return gone

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        return [acl for acl in self._acls if acl.matches_resource(resource_type, name)]
