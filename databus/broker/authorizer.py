"""The broker's authorization decision over its ACLs (storage/acls.py holds the rules'
data and their matching; the steps are listed there, as Kafka's StandardAuthorizer takes
them): ``authorize(principal, host, operation, resource type, name) -> bool``; and the
checks the server makes before a handler runs (``refusal``)."""

from __future__ import annotations

from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from databus.storage.acls import (
    IMPLIED_BY,
    WILDCARD,
    AclStore,
    Operation,
    Permission,
    ResourceType,
    check_principal,
)


def parse_super_users(text: str) -> frozenset[str]:
    """``User:alice;User:bob`` (Kafka's separator is ``;``) -> the set of principals."""
    return frozenset(check_principal(p.strip()) for p in text.split(";") if p.strip())


class Authorizer:
    """Kafka's authorization decision over an AclStore (see the module docstring)."""

    def __init__(self, store: AclStore, *, enabled: bool, super_users: frozenset[str] = frozenset(),
                 allow_if_no_acl: bool = False) -> None:
        self.store = store
        self.enabled = enabled
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if not self.enabled or principal in self.super_users:
            return True
        acls = self.store.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [acl for acl in acls
                if acl.principal in (principal, "User:*") and acl.host in (host, WILDCARD)]
        if any(acl.permission == Permission.DENY and acl.operation in (operation, Operation.ALL)
               for acl in mine):
            return False
        allowing = (operation, Operation.ALL, *IMPLIED_BY.get(operation, ()))
        return any(acl.permission == Permission.ALLOW and acl.operation in allowing
                   for acl in mine)

    def any_allowed(self, principal: str, host: str, operation: Operation,
                    resource_type: ResourceType) -> bool:
        """Whether some ALLOW ACL gives ``operation`` on some resource of the type (Kafka's
        authorizeByResourceType, simplified: a DENY on one name does not cancel another)."""
        if not self.enabled or principal in self.super_users:
            return True
        return any(acl.resource_type == resource_type and acl.permission == Permission.ALLOW
                   and acl.operation in (operation, Operation.ALL)
                   and acl.principal in (principal, "User:*") and acl.host in (host, WILDCARD)
                   for acl in self.store.all())


# -- checks made before a handler runs ----------------------------------------------------
# APIs about one resource whose response has a top-level error code: refused whole, with
# Kafka's code, by the server (server.py) before the handler runs.  APIs that name several
# resources, or whose response has errors only per partition, check in their handler
# (Produce, Fetch, Metadata, OffsetCommit, AddPartitionsToTxn, TxnOffsetCommit,
# WriteTxnMarkers, ...) with ``partition_errors`` below.

def _group(operation: Operation):
    def check(ctx, request) -> ErrorCode | None:
        if ctx.allowed(operation, ResourceType.GROUP, request.group_id):
            return None
        return ErrorCode.group_authorization_failed
    return check


def _cluster(operation: Operation):
    def check(ctx, request) -> ErrorCode | None:
        return None if ctx.cluster_allowed(operation) else ErrorCode.cluster_authorization_failed
    return check


def _init_producer_id(ctx, request) -> ErrorCode | None:
    """Kafka (KIP-679): an idempotent producer needs IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic; a transactional one WRITE on its transactional id."""
    if request.transactional_id is not None:
        if ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if ctx.cluster_allowed(Operation.IDEMPOTENT_WRITE) or ctx.broker.authorizer.any_allowed(
            ctx.session.principal, ctx.client_host, Operation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


def _transactional_id(group_operation: Operation | None = None):
    """WRITE on the request's transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then,
    for AddOffsetsToTxn, ``group_operation`` on its group (GROUP_AUTHORIZATION_FAILED)."""
    def check(ctx, request) -> ErrorCode | None:
        if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                           request.transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        if group_operation is not None and not ctx.allowed(group_operation, ResourceType.GROUP,
                                                           request.group_id):
            return ErrorCode.group_authorization_failed
        return None
    return check


REQUEST_CHECKS = {
    ApiKey.JOIN_GROUP: _group(Operation.READ),
    ApiKey.SYNC_GROUP: _group(Operation.READ),
    ApiKey.HEARTBEAT: _group(Operation.READ),
    ApiKey.LEAVE_GROUP: _group(Operation.READ),
    ApiKey.SHARE_GROUP_HEARTBEAT: _group(Operation.READ),
    ApiKey.SHARE_FETCH: _group(Operation.READ),
    ApiKey.SHARE_ACKNOWLEDGE: _group(Operation.READ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: _group(Operation.ALTER),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: _group(Operation.DELETE),
    ApiKey.DESCRIBE_CLUSTER: _cluster(Operation.DESCRIBE),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(Operation.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(Operation.DESCRIBE),
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_OFFSETS_TO_TXN: _transactional_id(Operation.READ),
    ApiKey.END_TXN: _transactional_id(),
}


def refusal(ctx, request) -> ErrorCode | None:
    """The error to refuse ``request`` with before its handler runs, or None."""
    if not ctx.broker.authorizer.enabled or request is None:
        return None
    check = REQUEST_CHECKS.get(ctx.api_key)
    return None if check is None else check(ctx, request)


def partition_errors(ctx, wanted, operation: Operation, *, exists=None,
                     refused: ErrorCode = ErrorCode.topic_authorization_failed) -> dict:
    """Kafka's per-partition refusals for a request about several (topic, partition)s:
    ``{(topic, partition): error}`` for each one whose topic the principal may not do
    ``operation`` on (``refused``), then, if ``exists`` is given, for each one that does not
    exist (UNKNOWN_TOPIC_OR_PARTITION); the partitions absent from the answer may go on."""
    allowed: dict[str, bool] = {}
    errors = {}
    for topic, partition in wanted:
        if topic not in allowed:
            allowed[topic] = ctx.allowed(operation, ResourceType.TOPIC, topic)
        if not allowed[topic]:
            errors[(topic, partition)] = refused
        elif exists is not None and not exists(topic, partition):
            errors[(topic, partition)] = ErrorCode.unknown_topic_or_partition
    return errors
