"""``databus groups``: list, describe, reset the offsets of, and delete consumer groups and
share groups (KIP-932).

Like Kafka's kafka-consumer-groups.sh and kafka-share-groups.sh, it talks to a broker over
the Kafka protocol (``--bootstrap HOST:PORT``; any Kafka-compatible cluster works), through
databus's own client (databus.client.cluster for requests, databus.client.offsets for
ListOffsets):

    databus groups list [--type share|classic]
    databus groups describe GROUP        state, members, and per partition: owner, committed
                                         offset, log end offset, lag
    databus groups describe SHARE-GROUP [--offsets | --members | --state]
                                         kafka-share-groups.sh's views: per partition the
                                         share-partition start offset and lag (default),
                                         the members and their assignments, or the state
    databus groups reset-offsets GROUP --topic T[:P1,P2] (--to-earliest | --to-latest |
                                 --to-datetime 2024-01-01T00:00:00 | --shift-by N) [--execute]
                                         (a share group: AlterShareGroupOffsets, no --shift-by)
    databus groups delete-offsets SHARE-GROUP --topic T   (DeleteShareGroupOffsets)
    databus groups delete GROUP

Whether GROUP is a share group is asked with ListGroups (its ``share`` type).

reset-offsets prints the plan and changes nothing unless ``--execute`` is given (Kafka's
dry-run default), and refuses a group that still has members: the offsets of a live group
belong to its consumers.  Exit status: 0 done, 1 the broker refused or is unreachable,
2 bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass, field

from databus.protocol.api_keys import ApiKey
from databus.tools.table import Column, console, print_table

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
LIST_GROUPS_TYPES = 5  # the ListGroups version with group types (share groups)
INACTIVE_STATES = ("Empty", "Dead")


class GroupsToolError(Exception):
    """A failure to report in one line (exit 1)."""


def _add_connection_options(parser, *, with_defaults: bool) -> None:
    def default(value):
        return value if with_defaults else argparse.SUPPRESS

    parser.add_argument("--bootstrap", default=default(DEFAULT_BOOTSTRAP), metavar="HOST:PORT",
                        help=f"a broker to ask (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--timeout", type=float, default=default(30.0), metavar="SECONDS",
                        help="give up after this long (default 30)")


def add_arguments(parser) -> None:
    _add_connection_options(parser, with_defaults=True)
    # Kafka users put --bootstrap anywhere (kafka-consumer-groups.sh takes it after the action
    # too): each action accepts the connection options again, without overriding the
    # top-level value when absent (SUPPRESS).
    common = argparse.ArgumentParser(add_help=False)
    _add_connection_options(common, with_defaults=False)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="list the groups", parents=[common])
    listing.add_argument("--type", choices=("classic", "consumer", "share"),
                         help="only groups of this type (kafka-groups.sh --group-type)")
    describe = sub.add_parser("describe", help="state, members, offsets and lag of a group",
                              parents=[common])
    describe.add_argument("group")
    view = describe.add_mutually_exclusive_group()
    for flag, what in (("--offsets", "start offset and lag per partition (the default)"),
                       ("--members", "members and their assignments"),
                       ("--state", "state, coordinator, epochs")):
        view.add_argument(flag, action="store_true", help=f"share groups: {what}")
    reset = sub.add_parser("reset-offsets", help="move an empty group's committed offsets",
                           parents=[common])
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, action="append", metavar="TOPIC[:P,P]",
                       help="a topic, optionally with some of its partitions; repeatable")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-datetime", metavar="ISO-8601",
                        help="first offset at or after this time, e.g. 2024-05-01T12:00:00 "
                             "(local time unless it carries an offset such as +00:00)")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="move the committed offset by N (negative: back)")
    reset.add_argument("--execute", action="store_true",
                       help="commit the new offsets (without it: only print the plan)")
    delete = sub.add_parser("delete", help="delete an empty group and its committed offsets",
                            parents=[common])
    delete.add_argument("group")
    delete_offsets = sub.add_parser(
        "delete-offsets", help="forget a share group's state of some topics", parents=[common])
    delete_offsets.add_argument("group")
    delete_offsets.add_argument("--topic", required=True, action="append", metavar="TOPIC",
                                help="a topic; repeatable")


def run(args) -> int:
    import trio

    from databus.client import KafkaError

    actions = {"list": _list, "describe": _describe, "reset-offsets": _reset,
               "delete": _delete, "delete-offsets": _delete_offsets}
    try:
        if args.action == "reset-offsets":
            args.timestamp = parse_datetime(args.to_datetime) if args.to_datetime else None
            args.topic_partitions = [parse_topic(t) for t in args.topic]
        return trio.run(_with_session, actions[args.action], args)
    except (GroupsToolError, KafkaError, ValueError) as exc:
        print(f"databus groups: {exc}", file=sys.stderr)
        return 1
    except trio.TooSlowError:
        print(f"databus groups: no answer from {args.bootstrap} within {args.timeout:g}s",
              file=sys.stderr)
        return 1


def parse_datetime(text: str) -> int:
    """ISO-8601 -> epoch milliseconds (naive times are local, as Kafka's tool reads them)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--to-datetime {text!r} is not an ISO-8601 date-time") from None
    return int(moment.timestamp() * 1000)


def parse_topic(text: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = text.partition(":")
    if not topic:
        raise ValueError(f"--topic {text!r} names no topic")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise ValueError(f"--topic {text!r}: partitions must be integers") from None


# -- session ---------------------------------------------------------------------------------


@dataclass
class Session:
    """A client Cluster plus the group coordinator's node id."""

    cluster: object
    timeout: float
    coordinators: dict[str, int] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # group -> coordinator host:port

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
        low, high = conn.broker_versions.get(int(api_key), (None, None))
        if high is None or low > highest:
            raise GroupsToolError(f"the broker does not serve {ApiKey(api_key).name} "
                                  f"(versions up to {highest} needed)")
        return await conn.send_body(build_request(api_key, min(high, highest), fields))

    async def coordinator(self, group: str) -> int:
        if group not in self.coordinators:
            response = await self.request(None, ApiKey.FIND_COORDINATOR,
                                          {"key": group, "key_type": 0,
                                           "coordinator_keys": [group]})
            _check(response.error_code, f"finding the coordinator of {group!r}")
            self.cluster.register_address(response.node_id, response.host, response.port)
            self.coordinators[group] = response.node_id
            self.addresses[group] = f"{response.host}:{response.port}"
        return self.coordinators[group]


async def _with_session(action, args) -> int:
    import trio

    from databus.client import AdminConfig, Cluster

    config = AdminConfig.from_kafka({"bootstrap.servers": args.bootstrap,
                                     "client.id": "databus-groups",
                                     "request.timeout.ms": int(args.timeout * 1000)})
    outcome: list = []
    with trio.fail_after(args.timeout):
        cluster = Cluster(args.bootstrap, config)
        async with cluster.running():
            try:
                outcome.append(await action(Session(cluster, args.timeout), args))
            except Exception as exc:
                # Raised after the nursery, so callers see it bare, not in an ExceptionGroup.
                outcome.append(exc)
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


def _check(error_code, what: str) -> None:
    from databus.protocol.errors import error_name

    code = int(error_code)
    if code != 0:
        raise GroupsToolError(f"{what}: {error_name(code)}")


# Kafka's kafka-consumer-groups.sh column widths (%-15s, %-10s ...), so piped output lines up
# as its output does and scripts written against it find the same fields.
GROUP_COLUMN, TOPIC_COLUMN = Column("GROUP", min_width=15), Column("TOPIC", min_width=15)
PARTITION_COLUMN = Column("PARTITION", min_width=10)


def _offset_column(header: str) -> Column:
    return Column(header, min_width=15)


# -- list ------------------------------------------------------------------------------------


async def _list(session: Session, args) -> int:
    kind = getattr(args, "type", None)
    response = await session.request_up_to(None, ApiKey.LIST_GROUPS, LIST_GROUPS_TYPES, {
        "states_filter": [], "types_filter": [kind] if kind else []})
    _check(response.error_code, "listing groups")
    states = {g.group_id: getattr(g, "group_state", "") for g in response.groups}
    unknown = [group for group, state in states.items() if not state]
    if unknown:
        # ListGroups < v4 carries no state: ask DescribeGroups instead.
        described = await session.request(None, ApiKey.DESCRIBE_GROUPS, {
            "groups": unknown, "include_authorized_operations": False})
        states.update({g.group_id: g.group_state for g in described.groups})
    print_table(
        [GROUP_COLUMN, Column("STATE", min_width=20), Column("PROTOCOL-TYPE", min_width=15),
         Column("TYPE")],
        [(g.group_id, states.get(g.group_id) or "?", g.protocol_type or "-",
          getattr(g, "group_type", "") or "-")
         for g in sorted(response.groups, key=lambda g: g.group_id)],
    )
    return 0


async def is_share_group(session: Session, group: str) -> bool:
    """Whether ListGroups (v5, type filter ``share``) names ``group`` as a share group."""
    response = await session.request_up_to(None, ApiKey.LIST_GROUPS, LIST_GROUPS_TYPES, {
        "states_filter": [], "types_filter": ["share"]})
    _check(response.error_code, "listing groups")
    return any(g.group_id == group and getattr(g, "group_type", "") == "share"
               for g in response.groups)


# -- describe --------------------------------------------------------------------------------


@dataclass
class GroupView:
    state: str
    protocol_type: str
    protocol: str
    members: list  # kio DescribedGroupMember
    owners: dict[tuple[str, int], object]  # (topic, partition) -> member
    committed: dict[tuple[str, int], int]


async def load_group(session: Session, group: str) -> GroupView:
    from databus.protocol.consumer_protocol import ConsumerProtocolError, decode_assignment

    node = await session.coordinator(group)
    (described,) = (await session.request(node, ApiKey.DESCRIBE_GROUPS,
                                          {"groups": [group],
                                           "include_authorized_operations": False})).groups
    _check(described.error_code, f"describing {group!r}")
    owners = {}
    if described.protocol_type == "consumer":
        for member in described.members:
            try:
                assigned = decode_assignment(bytes(member.member_assignment))
            except ConsumerProtocolError:
                continue
            for tp in assigned.partitions:
                owners[tp] = member
    fetched = await session.request(node, ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None,
                                                         "require_stable": False})
    _check(getattr(fetched, "error_code", 0), f"fetching the offsets of {group!r}")
    committed = {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics for p in t.partitions if p.committed_offset >= 0
    }
    return GroupView(described.group_state, described.protocol_type, described.protocol_data,
                     list(described.members), owners, committed)


async def _log_end_offsets(session: Session, partitions) -> dict[tuple[str, int], int]:
    from databus.client import LATEST, list_offsets

    if not partitions:
        return {}
    await session.cluster.refresh_metadata({t for t, _ in partitions}, allow_auto_create=False)
    known = [tp for tp in partitions if session.cluster.partitions_for(tp[0])]
    result = await list_offsets(session.cluster, {tp: LATEST for tp in known},
                                timeout=session.timeout)
    return {tp: offset for tp, (offset, _ts) in result.items()}


async def _describe(session: Session, args) -> int:
    if await is_share_group(session, args.group):
        return await _describe_share(session, args)
    view = await load_group(session, args.group)
    out = console()
    out.print(
        f"group [bold]{args.group}[/bold]: state {view.state}, "
        f"protocol {view.protocol_type or '-'}/{view.protocol or '-'}, "
        f"{len(view.members)} member(s)"
    )
    if view.state == "Dead" and not view.committed:
        out.print(f"group {args.group!r} does not exist")
        return 1
    partitions = sorted(set(view.owners) | set(view.committed))
    ends = await _log_end_offsets(session, partitions)
    rows = []
    for tp in partitions:
        current, end = view.committed.get(tp), ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        owner = view.owners.get(tp)
        rows.append((
            args.group, tp[0], str(tp[1]), _dash(current), _dash(end), _dash(lag),
            owner.member_id if owner else "-", owner.client_host if owner else "-",
            owner.client_id if owner else "-",
        ))
    # Kafka's columns, in its order and widths.
    print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN,
                 *map(_offset_column, ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")),
                 Column("CONSUMER-ID", min_width=15), Column("HOST", min_width=15),
                 Column("CLIENT-ID")], rows, to=out)
    idle = [m for m in view.members if not any(o is m for o in view.owners.values())]
    for m in idle:
        out.print(f"member {m.member_id} ({m.client_id}, {m.client_host}) has no partitions")
    return 0


def _dash(value) -> str:
    return "-" if value is None else str(value)


# -- reset-offsets ---------------------------------------------------------------------------


async def _reset(session: Session, args) -> int:
    from databus.client import EARLIEST, LATEST, list_offsets

    share = await is_share_group(session, args.group)
    if share:
        if args.shift_by is not None:
            raise GroupsToolError("--shift-by is not for share groups (kafka-share-groups.sh "
                                  "has --to-earliest, --to-latest and --to-datetime)")
        view = await load_share_offsets(session, args.group)
    else:
        view = await load_group(session, args.group)
    if view.state not in INACTIVE_STATES:
        raise GroupsToolError(
            f"offsets can only be reset when group {args.group!r} is inactive (no members), "
            f"but it is {view.state}"
        )
    cluster = session.cluster
    await cluster.refresh_metadata({t for t, _ in args.topic_partitions},
                                   allow_auto_create=False)
    partitions = []
    for topic, wanted in args.topic_partitions:
        existing = cluster.partitions_for(topic)
        if not existing:
            raise GroupsToolError(f"topic {topic!r} does not exist")
        missing = sorted(set(wanted or ()) - set(existing))
        if missing:
            raise GroupsToolError(f"topic {topic!r} has no partition {missing}")
        partitions += [(topic, p) for p in (wanted or sorted(existing))]

    earliest = await list_offsets(cluster, {tp: EARLIEST for tp in partitions},
                                  timeout=session.timeout)
    latest = await list_offsets(cluster, {tp: LATEST for tp in partitions},
                                timeout=session.timeout)
    low = {tp: o for tp, (o, _) in earliest.items()}
    high = {tp: o for tp, (o, _) in latest.items()}
    if args.to_earliest:
        new = dict(low)
    elif args.to_latest:
        new = dict(high)
    elif args.timestamp is not None:
        found = await list_offsets(cluster, {tp: args.timestamp for tp in partitions},
                                   timeout=session.timeout)
        new = {tp: (o if o >= 0 else high[tp]) for tp, (o, _) in found.items()}
    else:
        new = {}
        for tp in partitions:
            base = view.committed.get(tp, high[tp])
            new[tp] = min(max(base + args.shift_by, low[tp]), high[tp])

    # Kafka's plan columns (NEW-OFFSET last), with the offset it replaces before it.
    out = console()
    print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN, _offset_column("CURRENT-OFFSET"),
                 Column("NEW-OFFSET")],
                [(args.group, tp[0], str(tp[1]), _dash(view.committed.get(tp)), str(new[tp]))
                 for tp in partitions], to=out)
    if not args.execute:
        out.print("dry run: nothing changed; add --execute to commit these offsets")
        return 0
    if share:
        return await _alter_share_offsets(session, args.group, new)
    by_topic: dict[str, list] = {}
    for (topic, p), offset in new.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": "",
        })
    node = await session.coordinator(args.group)
    response = await session.request(node, ApiKey.OFFSET_COMMIT, {
        "group_id": args.group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time": -1,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    })
    for t in response.topics:
        for p in t.partitions:
            _check(p.error_code, f"committing {t.name}-{p.partition_index}")
    out.print(f"committed {len(new)} offset(s) for group {args.group!r}")
    return 0


# -- delete ----------------------------------------------------------------------------------


async def _delete(session: Session, args) -> int:
    node = await session.coordinator(args.group)
    response = await session.request(node, ApiKey.DELETE_GROUPS, {"groups_names": [args.group]})
    (result,) = response.results
    _check(result.error_code, f"deleting group {args.group!r}")
    console().print(f"deleted group {args.group!r}")
    return 0


# -- share groups ----------------------------------------------------------------------------


async def load_share_offsets(session: Session, group: str) -> GroupView:
    """A share group as GroupView: state and members from ShareGroupDescribe, the
    share-partition start offsets as ``committed`` (what reset-offsets moves)."""
    node = await session.coordinator(group)
    (described,) = (await session.request_up_to(node, ApiKey.SHARE_GROUP_DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False})).groups
    _check(described.error_code, f"describing share group {group!r}")
    offsets = await _share_offsets(session, node, group)
    return GroupView(described.group_state, "share", "", list(described.members), {},
                     {tp: start for tp, (start, _lag) in offsets.items() if start >= 0})


async def _share_offsets(session: Session, node, group: str) -> dict[tuple[str, int],
                                                                       tuple[int, int]]:
    response = await session.request_up_to(node, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {
        "groups": [{"group_id": group, "topics": None}]})
    (result,) = response.groups
    _check(result.error_code, f"describing the offsets of share group {group!r}")
    return {(t.topic_name, p.partition_index): (p.start_offset, getattr(p, "lag", -1))
            for t in result.topics for p in t.partitions}


async def _describe_share(session: Session, args) -> int:
    node = await session.coordinator(args.group)
    (described,) = (await session.request_up_to(node, ApiKey.SHARE_GROUP_DESCRIBE, 1, {
        "group_ids": [args.group], "include_authorized_operations": False})).groups
    _check(described.error_code, f"describing share group {args.group!r}")
    out = console()
    members = list(described.members)
    if args.state:
        # kafka-share-groups.sh --describe --state
        print_table([GROUP_COLUMN, Column("COORDINATOR (ID)", min_width=25),
                     Column("STATE", min_width=10), Column("GROUP-EPOCH", min_width=12),
                     Column("ASSIGNMENT-EPOCH", min_width=17), Column("#MEMBERS")],
                    [(args.group, f"{session.addresses[args.group]} ({node})",
                      described.group_state, str(described.group_epoch),
                      str(described.assignment_epoch), str(len(members)))], to=out)
        return 0
    if args.members:
        # kafka-share-groups.sh --describe --members
        rows = []
        for m in members:
            assigned = [(tp.topic_name, p) for tp in m.assignment.topic_partitions
                        for p in tp.partitions]
            rows.append((args.group, m.member_id, m.client_host, m.client_id,
                         str(len(assigned)),
                         ",".join(f"{t}:{p}" for t, p in sorted(assigned)) or "-"))
        print_table([GROUP_COLUMN, Column("CONSUMER-ID", min_width=15),
                     Column("HOST", min_width=15), Column("CLIENT-ID", min_width=15),
                     Column("#PARTITIONS", min_width=12), Column("ASSIGNMENT")], rows, to=out)
        return 0
    # kafka-share-groups.sh --describe (--offsets)
    offsets = await _share_offsets(session, node, args.group)
    out.print(f"share group [bold]{args.group}[/bold]: state {described.group_state}, "
              f"{len(members)} member(s)")
    print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN,
                 _offset_column("START-OFFSET"), Column("LAG")],
                [(args.group, t, str(p), _dash(start if start >= 0 else None),
                  _dash(lag if lag >= 0 else None))
                 for (t, p), (start, lag) in sorted(offsets.items())], to=out)
    return 0


async def _alter_share_offsets(session: Session, group: str,
                               new: dict[tuple[str, int], int]) -> int:
    by_topic: dict[str, list] = {}
    for (topic, p), offset in new.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "start_offset": offset})
    node = await session.coordinator(group)
    response = await session.request_up_to(node, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {
        "group_id": group,
        "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})
    _check(response.error_code, f"altering the offsets of share group {group!r}")
    for t in response.responses:
        for p in t.partitions:
            _check(p.error_code, f"altering {t.topic_name}-{p.partition_index}")
    console().print(f"set {len(new)} start offset(s) of share group {group!r}")
    return 0


async def _delete_offsets(session: Session, args) -> int:
    if not await is_share_group(session, args.group):
        raise GroupsToolError(f"{args.group!r} is not a share group (delete-offsets forgets "
                              "a share group's state of whole topics)")
    node = await session.coordinator(args.group)
    response = await session.request_up_to(node, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
        "group_id": args.group, "topics": [{"topic_name": t} for t in args.topic]})
    _check(response.error_code, f"deleting the offsets of share group {args.group!r}")
    for t in response.responses:
        _check(t.error_code, f"deleting the offsets of {t.topic_name}")
    console().print(f"deleted the state of {', '.join(args.topic)} in share group "
                    f"{args.group!r}")
    return 0
