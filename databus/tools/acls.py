"""``databus acls``: add, list and remove ACLs, in the shape of kafka-acls.sh.

    databus acls --add --allow-principal User:alice --operation Read --operation Describe \\
                 --topic orders [--resource-pattern-type prefixed] [--group billing]
    databus acls --add --allow-principal User:app --producer --topic events
    databus acls --add --allow-principal User:app --consumer --topic events --group app
    databus acls --list [--topic T | --group G | --cluster] [--principal User:alice]
    databus acls --remove --allow-principal User:alice --topic orders [--operation Read]

As with kafka-acls: ``--allow-principal`` / ``--deny-principal`` (with ``--allow-host`` /
``--deny-host``, default ``*``) and ``--operation`` (Read, Write, Create, Delete, Alter,
Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All; repeatable)
on each resource given (``--topic``, ``--group``, ``--transactional-id``, ``--cluster``;
``*`` is every name), ``--resource-pattern-type`` literal (default) or prefixed (for
``--list`` and ``--remove`` also any and match).  As kafka-acls: ``--producer`` is Write,
Describe and Create on the topics and Write and Describe on the transactional ids, with
``--idempotent`` also IdempotentWrite on the cluster; ``--consumer`` Read and Describe on the
topics and Read on the group; an operation the resource type does not support is refused.

Through a running broker (``--bootstrap-server``, with ``-X``/``--command-config`` for a
secured listener; needs ALTER/DESCRIBE on the cluster when ACLs are on), or directly in a
stopped broker's data directory (``--data-dir``).  Exit status: 0 done, 1 refused, 2 usage.
"""

from __future__ import annotations

import sys

from databus.cli_helpers.options import (
    add_bootstrap,
    add_json,
    client_settings,
    print_json,
    run_admin,
)
from databus.storage.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)
from databus.tools.users import add_security_client_arguments

ACTIONS = ("add", "list", "remove")


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=ACTIONS)
    add_bootstrap(parser)
    for flag, what in (("--topic", "topic"), ("--group", "consumer group"),
                       ("--transactional-id", "transactional id")):
        parser.add_argument(flag, action="append", default=[],
                            help=f"a {what} the ACLs apply to (repeatable; * = all)")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", default=None,
                        help="literal (default for --add) or prefixed; any or match too for "
                             "--list and --remove")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--principal", help="--list: only the ACLs of this principal")
    parser.add_argument("--operation", action="append", default=[],
                        help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, ClusterAction, All (repeatable)")
    parser.add_argument("--producer", action="store_true",
                        help="the operations a producer needs on --topic")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: also IdempotentWrite on the cluster (WRITE on "
                        "a topic or a --transactional-id is enough for an idempotent "
                        "producer since Kafka 3.0)")
    parser.add_argument("--consumer", action="store_true",
                        help="the operations a consumer needs on --topic and --group")
    parser.add_argument("--force", action="store_true", help="accepted for kafka-acls "
                        "compatibility (--remove never asks)")
    add_security_client_arguments(parser)
    add_json(parser)


def _resources(args, *, default_any: bool) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, t) for t in args.topic]
    resources += [(ResourceType.GROUP, g) for g in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not resources and default_any:
        resources.append((ResourceType.ANY, None))
    return resources


def _entries(args) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) pairs of the --allow/--deny flags."""
    out = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, Permission.ALLOW),
            (args.deny_principal, args.deny_host, Permission.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                out.append((principal, host, permission))
    return out


def _operations(args, resource_type: ResourceType) -> list[Operation]:
    ops = [parse_enum(Operation, _snake(o), "operation") for o in args.operation]
    if args.producer:  # kafka-acls' getProducerResourceFilterToAcls
        if resource_type == ResourceType.TOPIC:
            ops += [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE]
        elif resource_type == ResourceType.TRANSACTIONAL_ID:
            ops += [Operation.WRITE, Operation.DESCRIBE]
        elif resource_type == ResourceType.CLUSTER and args.idempotent:
            ops += [Operation.IDEMPOTENT_WRITE]
    if args.consumer:
        if resource_type == ResourceType.TOPIC:
            ops += [Operation.READ, Operation.DESCRIBE]
        elif resource_type == ResourceType.GROUP:
            ops += [Operation.READ]
    return list(dict.fromkeys(ops))


def _snake(name: str) -> str:
    """Kafka's CamelCase operation names (DescribeConfigs) -> DESCRIBE_CONFIGS."""
    import re

    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name.strip())


def _check_operations(rtype: ResourceType, ops: list[Operation]) -> None:
    """kafka-acls' check: each operation must be one the resource type supports."""
    supported = SUPPORTED_OPERATIONS.get(rtype, ())
    wrong = [op for op in ops if op != Operation.ALL and op not in supported]
    if wrong:
        raise AclError(
            f"ResourceType {_camel(rtype.name)} only supports operations "
            f"{', '.join(_camel(op.name) for op in (*supported, Operation.ALL))} "
            f"(not {', '.join(_camel(op.name) for op in wrong)})")


def _camel(name: str) -> str:
    """TRANSACTIONAL_ID -> TransactionalId, as kafka-acls writes names."""
    return "".join(part.capitalize() for part in name.split("_"))


def bindings_to_add(args) -> list[AclBinding]:
    pattern = parse_enum(PatternType, args.resource_pattern_type or "literal", "pattern type")
    if args.idempotent and not args.producer:
        raise AclError("--idempotent is used with --producer")
    if args.producer and args.idempotent:
        args.cluster = True  # IdempotentWrite on the cluster, as kafka-acls adds it
    entries = _entries(args)
    if not entries:
        raise AclError("--add needs --allow-principal or --deny-principal")
    bindings = []
    for rtype, name in _resources(args, default_any=False):
        ops = _operations(args, rtype)
        if not ops and rtype == ResourceType.CLUSTER and args.producer:
            continue
        if not ops:
            raise AclError("--add needs --operation (or --producer / --consumer)")
        _check_operations(rtype, ops)
        for principal, host, permission in entries:
            for op in ops:
                bindings.append(AclBinding(rtype, name, pattern if rtype != ResourceType.CLUSTER
                                           else PatternType.LITERAL, principal, host, op,
                                           permission).validate())
    if not bindings:
        raise AclError("--add needs a resource: --topic, --group, --transactional-id or "
                       "--cluster")
    return bindings


def filters(args, *, listing: bool) -> list[AclFilter]:
    pattern = parse_enum(PatternType, args.resource_pattern_type or "any", "pattern type")
    entries = _entries(args)
    principals: list[tuple[str | None, str | None, Permission]] = (
        [(p, None if not (args.allow_host or args.deny_host) else h, perm)
         for p, h, perm in entries] or
        [(args.principal if listing else None, None, Permission.ANY)])
    out = []
    for rtype, name in _resources(args, default_any=True):
        ops = _operations(args, rtype) or [Operation.ANY]
        for principal, host, permission in principals:
            for op in ops:
                out.append(AclFilter(rtype, name, pattern, principal, host, op,
                                     permission).validate())
    return out


def _describe(acl: AclBinding) -> dict:
    return {"resource_type": acl.resource_type.name, "resource_name": acl.resource_name,
            "pattern_type": acl.pattern_type.name, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _print(args, acls: list[AclBinding], verb: str | None = None) -> None:
    if args.json:
        print_json({"acls": [_describe(a) for a in acls]})
        return
    if verb:
        print(f"{verb} {len(acls)} ACL(s)")
    from databus.cli_helpers.table import print_table

    print_table(["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION",
                 "PERMISSION"],
                [[a.resource_type.name, a.resource_name, a.pattern_type.name, a.principal,
                  a.host, a.operation.name, a.permission.name] for a in acls])


def run(args) -> int:
    try:
        if args.action == "add":
            wanted: list = bindings_to_add(args)
        else:
            wanted = filters(args, listing=args.action == "list")
    except AclError as exc:
        print(f"databus acls {args.action}: {exc}", file=sys.stderr)
        return 2
    if args.data_dir:
        return _offline(args, wanted)
    return _online(args, wanted)


def _offline(args, wanted) -> int:
    from databus.storage.acls import AclStore

    try:
        store = AclStore(args.data_dir).load()
        if args.action == "add":
            store.add(wanted)
            _print(args, wanted, "Added")
        elif args.action == "remove":
            gone = [acl for f in wanted for acl in store.delete(f)]
            _print(args, gone, "Removed")
        else:
            _print(args, sorted({acl for f in wanted for acl in store.describe(f)}))
    except (AclError, OSError) as exc:
        print(f"databus acls: {exc}", file=sys.stderr)
        return 1
    return 0


def _wire_binding(acl: AclBinding) -> dict:
    return {"resource_type": int(acl.resource_type), "resource_name": acl.resource_name,
            "resource_pattern_type": int(acl.pattern_type), "principal": acl.principal,
            "host": acl.host, "operation": int(acl.operation),
            "permission_type": int(acl.permission)}


def _wire_filter(f: AclFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type),
            "resource_name_filter": f.resource_name, "pattern_type_filter": int(f.pattern_type),
            "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission)}


def _from_wire(item: dict) -> AclBinding:
    return AclBinding(ResourceType(item["resource_type"]), item["resource_name"],
                      PatternType(item["resource_pattern_type"]), item["principal"],
                      item["host"], Operation(item["operation"]),
                      Permission(item["permission_type"]))


def _online(args, wanted) -> int:
    import trio

    from databus.client import Admin, AdminConfig, KafkaError

    try:
        config = AdminConfig.from_kafka({"request.timeout.ms": int(args.timeout * 1000),
                                         **client_settings(args)})
    except KafkaError as exc:
        print(f"databus acls: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        with trio.fail_after(args.timeout):
            async with Admin(args.bootstrap, config) as admin:
                if args.action == "add":
                    results = await admin.create_acls([_wire_binding(b) for b in wanted])
                    failed = [e for e in results if e is not None]
                    if failed:
                        print(f"databus acls add: {failed[0]}", file=sys.stderr)
                        return 1
                    _print(args, wanted, "Added")
                elif args.action == "remove":
                    results = await admin.delete_acls([_wire_filter(f) for f in wanted])
                    gone = []
                    for result in results:
                        if isinstance(result, Exception):
                            print(f"databus acls remove: {result}", file=sys.stderr)
                            return 1
                        gone += [_from_wire(item) for item in result]
                    _print(args, gone, "Removed")
                else:
                    found = set()
                    for f in wanted:
                        found.update(_from_wire(i) for i in await admin.describe_acls(
                            _wire_filter(f)))
                    _print(args, sorted(found))
                return 0

    return run_admin("acls", main, args)
