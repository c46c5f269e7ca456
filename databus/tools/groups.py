"""``databus groups``: list, describe, reset the offsets of, and delete consumer groups and
share groups (KIP-932).

Like Kafka's kafka-consumer-groups.sh and kafka-share-groups.sh, it talks to a broker over
the Kafka protocol (``--bootstrap-server HOST:PORT``, alias ``--bootstrap``; any
Kafka-compatible cluster works), through databus's own client (databus.client.cluster for
requests, databus.client.offsets for ListOffsets):

    databus groups list [--type share|classic] [--state S,S] [--json]
    databus groups describe (GROUP | --group G ... | --all-groups)
                            [--offsets | --members [--verbose] | --state] [--json]
        --offsets (default): per partition: owner, committed offset, log end offset, lag
    databus groups reset-offsets (GROUP | --group G ... | --all-groups)
                            (--topic T[:P1,P2] ... | --all-topics)
                            (--to-earliest | --to-latest | --to-current | --to-offset N |
                             --to-datetime 2024-01-01T00:00:00 | --by-duration PnDTnHnMnS |
                             --shift-by N) [--dry-run | --execute] [--export]
    databus groups delete (GROUP | --group G ... | --all-groups)
    databus groups delete-offsets SHARE-GROUP --topic T   (DeleteShareGroupOffsets)

A consumer group of the new protocol (KIP-848, ``group.protocol=consumer``) is described
through ConsumerGroupDescribe (the broker's assignment; its group and member epochs in
``--state``, ``--members --verbose`` and ``--json``), which DescribeGroups cannot show.
A share group is described with kafka-share-groups.sh's views (--offsets: share-partition
start offset and lag; --members; --state: coordinator, epochs) and reset through
AlterShareGroupOffsets (--to-earliest, --to-latest, --to-datetime, --by-duration).  Whether
GROUP is a share group is asked with ListGroups (its ``share`` type).

Kafka's flag spelling of the action works too (``databus groups --describe --group G``).
reset-offsets prints the plan and changes nothing unless ``--execute`` is given (Kafka's
dry-run default; ``--dry-run`` says so explicitly; ``--export`` prints the plan as Kafka's
CSV), and refuses a group that still has members: the offsets of a live group belong to its
consumers.  Exit status: 0 done, 1 the broker refused or is unreachable, 2 bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from dataclasses import dataclass, field

from databus.cli_helpers.options import (
    DEFAULT_BOOTSTRAP,
    add_command_config,
    add_json,
    client_settings,
    print_json,
)
from databus.cli_helpers.table import Column, console, print_table
from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from databus.protocol.share_dlq import DLQ_COPY_CONFIG, DLQ_TOPIC_CONFIG

ACTIONS = ("list", "describe", "reset-offsets", "delete", "delete-offsets")
INACTIVE_STATES = ("Empty", "Dead")
LIST_GROUPS_TYPES = 5  # the ListGroups version with group types (share groups)


class GroupsToolError(Exception):
    """A failure to report in one line (exit 1)."""


def _add_connection_options(parser, *, with_defaults: bool) -> None:
    def default(value):
        return value if with_defaults else argparse.SUPPRESS

    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap",
                        default=default(DEFAULT_BOOTSTRAP), metavar="HOST:PORT",
                        help=f"a broker to ask (default {DEFAULT_BOOTSTRAP}); --bootstrap "
                             "is an alias")
    parser.add_argument("--timeout", type=float, default=default(30.0), metavar="SECONDS",
                        help="give up after this long (default 30)")
    # a secured cluster's settings, as kafka-consumer-groups.sh --command-config takes them
    add_command_config(parser, defaults=with_defaults)


def add_arguments(parser) -> None:
    _add_connection_options(parser, with_defaults=True)
    # Kafka users put --bootstrap anywhere (kafka-consumer-groups.sh takes it after the action
    # too): each action accepts the connection options again, without overriding the
    # top-level value when absent (SUPPRESS).
    common = argparse.ArgumentParser(add_help=False)
    _add_connection_options(common, with_defaults=False)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="list the groups", parents=[common])
    listing.add_argument("--state", metavar="S,S",
                         help="only groups in these states (e.g. Stable,Empty)")
    listing.add_argument("--type", choices=("classic", "consumer", "share"),
                         help="only groups of this type (kafka-groups.sh --group-type)")
    add_json(listing)
    describe = sub.add_parser("describe", help="state, members, offsets and lag of a group",
                              parents=[common])
    _add_group_selection(describe)
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true",
                       help="per partition: committed offset, log end, lag, owner (default)")
    shown.add_argument("--members", action="store_true",
                       help="the members: consumer id, host, client id, partition count")
    shown.add_argument("--state", action="store_true",
                       help="coordinator, assignment strategy, state, member count")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: each member's group.instance.id and "
                               "assignment")
    add_json(describe)
    reset = sub.add_parser("reset-offsets", help="move an empty group's committed offsets",
                           parents=[common])
    _add_group_selection(reset)
    topics = reset.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", action="append", metavar="TOPIC[:P,P]",
                        help="a topic, optionally with some of its partitions; repeatable")
    topics.add_argument("--all-topics", action="store_true",
                        help="every topic the group has committed offsets for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-current", action="store_true",
                        help="the committed offset (the log end where there is none)")
    target.add_argument("--to-offset", type=int, metavar="N",
                        help="this offset (kept within the partition's earliest..latest)")
    target.add_argument("--to-datetime", metavar="ISO-8601",
                        help="first offset at or after this time, e.g. 2024-05-01T12:00:00 "
                             "(local time unless it carries an offset such as +00:00)")
    target.add_argument("--by-duration", metavar="PnDTnHnMnS",
                        help="first offset at or after this long ago, e.g. PT30M, P1DT2H")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="move the committed offset by N (negative: back)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true",
                      help="commit the new offsets (without it: only print the plan)")
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the plan (the default)")
    reset.add_argument("--export", action="store_true",
                       help="print the plan as Kafka's CSV (topic,partition,offset; with "
                            "several groups group,topic,partition,offset)")
    delete = sub.add_parser("delete", help="delete an empty group and its committed offsets",
                            parents=[common])
    _add_group_selection(delete)
    delete_offsets = sub.add_parser(
        "delete-offsets", help="forget a share group's state of some topics", parents=[common])
    _add_group_selection(delete_offsets)
    delete_offsets.add_argument("--topic", required=True, action="append", metavar="TOPIC",
                                help="a topic; repeatable")


def _add_group_selection(parser) -> None:
    parser.add_argument("group", nargs="?", help="the group (or --group G)")
    parser.add_argument("--group", dest="groups", action="append", default=[], metavar="G",
                        help="a group (Kafka's spelling; repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every group")

def run(args) -> int:
    import trio

    from databus.client import KafkaError

    actions = {"list": _list, "describe": _describe, "reset-offsets": _reset,
               "delete": _delete, "delete-offsets": _delete_offsets}
    try:
        if args.action != "list":
            args.groups = ([args.group] if args.group else []) + list(args.groups)
            if bool(args.groups) == bool(args.all_groups):
                print(f"databus groups {args.action}: name a group (GROUP or --group G) "
                      "or give --all-groups", file=sys.stderr)
                return 2
        if args.action == "reset-offsets":
            args.timestamp = parse_datetime(args.to_datetime) if args.to_datetime else None
            if args.by_duration:
                args.timestamp = int(time.time() * 1000) - parse_duration(args.by_duration)
            args.topic_partitions = [parse_topic(t) for t in args.topic or ()]
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


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMnS) -> milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"--by-duration {text!r} is not a duration such as PT30M or P1DT2H")
    d, h, m, sec = (float(match[g] or 0) for g in "dhms")
    return int((((d * 24 + h) * 60 + m) * 60 + sec) * 1000)


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
            self.addresses[response.node_id] = f"{response.host}:{response.port}"
        return self.coordinators[group]


async def _with_session(action, args) -> int:
    import trio

    from databus.client import AdminConfig, Cluster

    config = AdminConfig.from_kafka({"bootstrap.servers": args.bootstrap,
                                     "client.id": "databus-groups",
                                     "request.timeout.ms": int(args.timeout * 1000),
                                     **client_settings(args)})
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


async def list_group_states(session: Session,
                            kind: str | None = None) -> list[tuple[str, str, str, str]]:
    """(group id, state, protocol type, group type) of every group (of type ``kind``),
    sorted by id."""
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
    return [(g.group_id, states.get(g.group_id) or "?", g.protocol_type or "-",
             getattr(g, "group_type", "") or "-")
            for g in sorted(response.groups, key=lambda g: g.group_id)]


async def _list(session: Session, args) -> int:
    rows = await list_group_states(session, args.type)
    if args.state:
        wanted = {s.strip().lower() for s in args.state.split(",") if s.strip()}
        rows = [r for r in rows if r[1].lower() in wanted]
    if args.json:
        print_json({"groups": [{"group": g, "state": st, "protocol_type": pt, "type": gt}
                               for g, st, pt, gt in rows]})
        return 0
    print_table([GROUP_COLUMN, Column("STATE", min_width=20),
                 Column("PROTOCOL-TYPE", min_width=15), Column("TYPE")], rows)
    return 0


async def _selected_groups(session: Session, args) -> list[str]:
    """The groups named (GROUP, --group) or, with --all-groups, every group."""
    if args.all_groups:
        return [row[0] for row in await list_group_states(session)]
    return list(dict.fromkeys(args.groups))


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
    members: list  # kio DescribedGroupMember, or ProtocolMember
    owners: dict[tuple[str, int], object]  # (topic, partition) -> member
    committed: dict[tuple[str, int], int]
    coordinator: int = -1
    epochs: tuple[int, int] | None = None  # consumer protocol: group, assignment epoch


@dataclass(frozen=True)
class ProtocolMember:
    """A member of a consumer-protocol group (KIP-848) in DescribeGroups' member shape."""

    member_id: str
    group_instance_id: str | None
    client_host: str
    client_id: str
    member_epoch: int


async def _consumer_protocol_group(session: Session, node: int, group: str):
    """ConsumerGroupDescribe's answer for ``group``, or None when the broker does not serve
    the API or ``group`` is not a consumer-protocol group."""
    from databus.protocol.errors import ErrorCode

    conn = await session.cluster.connection(node)
    if int(ApiKey.CONSUMER_GROUP_DESCRIBE) not in conn.broker_versions:
        return None
    (described,) = (await session.request_up_to(node, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False})).groups
    if described.error_code == ErrorCode.group_id_not_found:
        return None
    _check(described.error_code, f"describing {group!r}")
    return described


async def load_group(session: Session, group: str) -> GroupView:
    from databus.protocol.consumer_protocol import ConsumerProtocolError, decode_assignment

    node = await session.coordinator(group)
    (described,) = (await session.request(node, ApiKey.DESCRIBE_GROUPS,
                                          {"groups": [group],
                                           "include_authorized_operations": False})).groups
    if described.group_state == "Dead" or described.error_code == 69:  # GROUP_ID_NOT_FOUND
        # not a classic group (Kafka 4's DescribeGroups v6 says so with an error): maybe a
        # consumer-protocol one
        consumer = await _consumer_protocol_group(session, node, group)
        if consumer is not None:
            return await _consumer_protocol_view(session, node, group, consumer)
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
    return GroupView(described.group_state, described.protocol_type, described.protocol_data,
                     list(described.members), owners, await _committed(session, node, group),
                     node)


async def _committed(session: Session, node: int, group: str) -> dict[tuple[str, int], int]:
    fetched = await session.request(node, ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None,
                                                         "require_stable": False})
    _check(getattr(fetched, "error_code", 0), f"fetching the offsets of {group!r}")
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics for p in t.partitions if p.committed_offset >= 0
    }


async def _consumer_protocol_view(session: Session, node: int, group: str,
                                  described) -> GroupView:
    members, owners = [], {}
    for m in described.members:
        member = ProtocolMember(m.member_id, m.instance_id, m.client_host, m.client_id,
                                m.member_epoch)
        members.append(member)
        for tp in m.assignment.topic_partitions:
            for p in tp.partitions:
                owners[(tp.topic_name, p)] = member
    return GroupView(described.group_state, "consumer", described.assignor_name, members,
                     owners, await _committed(session, node, group), node,
                     (described.group_epoch, described.assignment_epoch))


async def _log_end_offsets(session: Session, partitions) -> dict[tuple[str, int], int]:
    from databus.client import LATEST, list_offsets

    if not partitions:
        return {}
    await session.cluster.refresh_metadata({t for t, _ in partitions}, allow_auto_create=False)
    known = [tp for tp in partitions if session.cluster.partitions_for(tp[0])]
    result = await list_offsets(session.cluster, {tp: LATEST for tp in known},
                                timeout=session.timeout)
    return {tp: offset for tp, (offset, _ts) in result.items()}


async def group_document(session: Session, group: str, view: GroupView) -> dict:
    """A group as ``describe --json`` prints it (fields documented in docs/cli.md)."""
    partitions = sorted(set(view.owners) | set(view.committed))
    ends = await _log_end_offsets(session, partitions)
    offsets = []
    for tp in partitions:
        current, end = view.committed.get(tp), ends.get(tp)
        owner = view.owners.get(tp)
        offsets.append({
            "topic": tp[0], "partition": tp[1], "current_offset": current,
            "log_end_offset": end,
            "lag": end - current if current is not None and end is not None else None,
            "consumer_id": owner.member_id if owner else None,
            "host": owner.client_host if owner else None,
            "client_id": owner.client_id if owner else None,
        })
    members = [{
        "consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
        "host": m.client_host, "client_id": m.client_id,
        "assignment": [{"topic": t, "partition": p}
                       for (t, p), o in sorted(view.owners.items()) if o is m],
        **({"member_epoch": m.member_epoch} if view.epochs else {}),
    } for m in view.members]
    doc = {"group": group, "state": view.state, "protocol_type": view.protocol_type,
           "assignment_strategy": view.protocol,
           "coordinator": {"id": view.coordinator,
                           "address": session.addresses.get(view.coordinator)},
           "members": members, "offsets": offsets}
    if view.epochs:  # a consumer-protocol group (KIP-848): Kafka's GROUP-EPOCH columns
        doc.update(type="consumer", group_epoch=view.epochs[0],
                   assignment_epoch=view.epochs[1])
    return doc


async def _describe(session: Session, args) -> int:
    status, documents = 0, []
    out = console()
    for n, group in enumerate(await _selected_groups(session, args)):
        if await is_share_group(session, group):
            if args.json:
                raise GroupsToolError(f"--json does not describe share groups yet ({group!r} "
                                      "is one)")
            if n:
                out.print()
            await _describe_share(session, group, args)
            continue
        view = await load_group(session, group)
        missing = view.state == "Dead" and not view.committed
        if args.json:
            if missing:
                print(f"databus groups: group {group!r} does not exist", file=sys.stderr)
                status = 1
            else:
                documents.append(await group_document(session, group, view))
            continue
        if n:
            out.print()
        if missing:
            out.print(f"group {group!r} does not exist")
            status = 1
            continue
        doc = await group_document(session, group, view)
        if args.state:
            _print_state(doc, out)
        elif args.members:
            _print_members(doc, args.verbose, out)
        else:
            _print_offsets(doc, out)
    if args.json:
        print_json({"groups": documents})
    return status


def _print_state(doc: dict, out) -> None:
    # kafka-consumer-groups.sh --describe --state: its columns, in its order and widths.
    # A consumer-protocol group (KIP-848) adds Kafka 4's GROUP-EPOCH and
    # TARGET-ASSIGNMENT-EPOCH.
    coordinator = doc["coordinator"]
    columns = [GROUP_COLUMN, Column("COORDINATOR (ID)", min_width=25),
               Column("ASSIGNMENT-STRATEGY", min_width=20), Column("STATE", min_width=15)]
    row = [doc["group"], f"{coordinator['address'] or '-'} ({coordinator['id']})",
           doc["assignment_strategy"] or "-", doc["state"]]
    if "group_epoch" in doc:
        columns += [Column("GROUP-EPOCH", min_width=12),
                    Column("TARGET-ASSIGNMENT-EPOCH", min_width=24)]
        row += [str(doc["group_epoch"]), str(doc["assignment_epoch"])]
    print_table(columns + [Column("#MEMBERS")], [row + [str(len(doc["members"]))]], to=out)


def _print_members(doc: dict, verbose: bool, out) -> None:
    # kafka-consumer-groups.sh --describe --members [--verbose].
    # --verbose adds Kafka's GROUP-INSTANCE-ID column (static members, KIP-345; '-' for a
    # dynamic one) and the ASSIGNMENT column.
    columns = [GROUP_COLUMN, Column("CONSUMER-ID", min_width=15)]
    if verbose:
        columns.append(Column("GROUP-INSTANCE-ID", min_width=17))
    columns += [Column("HOST", min_width=15), Column("CLIENT-ID", min_width=15),
                Column("#PARTITIONS", min_width=12)]
    # A consumer-protocol group (KIP-848) adds the member's CURRENT-EPOCH with --verbose.
    epochs = verbose and "group_epoch" in doc
    if epochs:
        columns.append(Column("CURRENT-EPOCH", min_width=14))
    rows = []
    for m in doc["members"]:
        row = [doc["group"], m["consumer_id"]]
        if verbose:
            row.append(m["group_instance_id"] or "-")
        row += [m["host"], m["client_id"], str(len(m["assignment"]))]
        if epochs:
            row.append(str(m["member_epoch"]))
        if verbose:
            row.append(_assignment_text(m["assignment"]))
        rows.append(row)
    if verbose:
        columns.append(Column("ASSIGNMENT"))
    if not rows:
        out.print(f"Consumer group '{doc['group']}' has no active members.")
        return
    print_table(columns, rows, to=out)


def _assignment_text(assignment: list[dict]) -> str:
    """Kafka's ASSIGNMENT cell: topic(0,1),other(2); '-' when empty."""
    by_topic: dict[str, list[int]] = {}
    for a in assignment:
        by_topic.setdefault(a["topic"], []).append(a["partition"])
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-"


def _print_offsets(doc: dict, out) -> None:
    out.print(
        f"group [bold]{doc['group']}[/bold]: state {doc['state']}, "
        f"protocol {doc['protocol_type'] or '-'}/{doc['assignment_strategy'] or '-'}, "
        f"{len(doc['members'])} member(s)"
    )
    rows = [(doc["group"], o["topic"], str(o["partition"]), _dash(o["current_offset"]),
             _dash(o["log_end_offset"]), _dash(o["lag"]), o["consumer_id"] or "-",
             o["host"] or "-", o["client_id"] or "-") for o in doc["offsets"]]
    # Kafka's columns, in its order and widths.
    print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN,
                 *map(_offset_column, ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")),
                 Column("CONSUMER-ID", min_width=15), Column("HOST", min_width=15),
                 Column("CLIENT-ID")], rows, to=out)
    for m in doc["members"]:
        if not m["assignment"]:
            out.print(f"member {m['consumer_id']} ({m['client_id']}, {m['host']}) "
                      "has no partitions")


def _dash(value) -> str:
    return "-" if value is None else str(value)


# -- reset-offsets ---------------------------------------------------------------------------


async def _reset_partitions(session: Session, args, view: GroupView) -> list[tuple[str, int]]:
    """The partitions to reset: --topic's (checked against the cluster) or, with
    --all-topics, those the group has committed offsets for."""
    cluster = session.cluster
    wanted = ([(t, None) for t in sorted({t for t, _ in view.committed})]
              if args.all_topics else args.topic_partitions)
    await cluster.refresh_metadata({t for t, _ in wanted}, allow_auto_create=False)
    partitions = []
    for topic, chosen in wanted:
        existing = cluster.partitions_for(topic)
        if not existing:
            raise GroupsToolError(f"topic {topic!r} does not exist")
        missing = sorted(set(chosen or ()) - set(existing))
        if missing:
            raise GroupsToolError(f"topic {topic!r} has no partition {missing}")
        partitions += [(topic, p) for p in (chosen or sorted(existing))]
    return partitions


async def plan_reset(session: Session, args, view: GroupView, partitions) -> dict:
    """(topic, partition) -> new offset, as kafka-consumer-groups.sh computes it: every
    target but --to-earliest/--to-latest is kept within the partition's earliest..latest."""
    from databus.client import EARLIEST, LATEST, list_offsets

    cluster = session.cluster
    earliest = await list_offsets(cluster, {tp: EARLIEST for tp in partitions},
                                  timeout=session.timeout)
    latest = await list_offsets(cluster, {tp: LATEST for tp in partitions},
                                timeout=session.timeout)
    low = {tp: o for tp, (o, _) in earliest.items()}
    high = {tp: o for tp, (o, _) in latest.items()}

    def clamp(tp, offset: int) -> int:
        return min(max(offset, low[tp]), high[tp])

    if args.to_earliest:
        return dict(low)
    if args.to_latest:
        return dict(high)
    if args.to_current:
        return {tp: view.committed.get(tp, high[tp]) for tp in partitions}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.timestamp is not None:
        found = await list_offsets(cluster, {tp: args.timestamp for tp in partitions},
                                   timeout=session.timeout)
        return {tp: (o if o >= 0 else high[tp]) for tp, (o, _) in found.items()}
    return {tp: clamp(tp, view.committed.get(tp, high[tp]) + args.shift_by)
            for tp in partitions}


async def plan_group_reset(session: Session, group: str, args):
    """(view, partitions, new offsets, is a share group) of resetting ``group`` as ``args``
    say (reset-offsets' options; the web console fills the same fields).  Refuses a group
    with members: the offsets of a live group belong to its consumers."""
    share = await is_share_group(session, group)
    if share:
        if args.shift_by is not None or args.to_offset is not None or args.to_current:
            raise GroupsToolError(
                "--shift-by, --to-offset and --to-current are not for share groups "
                "(kafka-share-groups.sh has --to-earliest, --to-latest and --to-datetime)")
        view = await load_share_offsets(session, group)
    else:
        view = await load_group(session, group)
    if view.state not in INACTIVE_STATES:
        raise GroupsToolError(
            f"offsets can only be reset when group {group!r} is inactive (no members), "
            f"but it is {view.state}"
        )
    partitions = await _reset_partitions(session, args, view)
    return view, partitions, await plan_reset(session, args, view, partitions), share


async def execute_group_reset(session: Session, group: str, new: dict, share: bool) -> None:
    """Commit a plan of plan_group_reset (share groups: their start offsets)."""
    if share:
        await _alter_share_offsets(session, group, new)
    else:
        await _commit(session, group, new)


async def _reset(session: Session, args) -> int:
    groups = await _selected_groups(session, args)
    plans = [(group, *await plan_group_reset(session, group, args)) for group in groups]

    out = console()
    if args.export:
        # Kafka's CSV: topic,partition,offset; with several groups the group comes first.
        for group, _view, partitions, new, _share in plans:
            for tp in partitions:
                fields = [tp[0], str(tp[1]), str(new[tp])]
                out.out(",".join([group, *fields] if len(groups) > 1 else fields),
                        highlight=False)
    else:
        # Kafka's plan columns (NEW-OFFSET last), with the offset it replaces before it.
        print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN,
                     _offset_column("CURRENT-OFFSET"), Column("NEW-OFFSET")],
                    [(group, tp[0], str(tp[1]), _dash(view.committed.get(tp)), str(new[tp]))
                     for group, view, partitions, new, _share in plans for tp in partitions],
                    to=out)
    # With --export stdout is the CSV alone, so the notes go to stderr.
    notes = console(stderr=args.export)
    if not args.execute:
        notes.print("dry run: nothing changed; add --execute to commit these offsets")
        return 0
    for group, _view, _partitions, new, share in plans:
        await execute_group_reset(session, group, new, share)
        if share:
            notes.print(f"set {len(new)} start offset(s) of share group {group!r}")
        else:
            notes.print(f"committed {len(new)} offset(s) for group {group!r}")
    return 0


async def _commit(session: Session, group: str, new: dict) -> None:
    by_topic: dict[str, list] = {}
    for (topic, p), offset in new.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": "",
        })
    node = await session.coordinator(group)
    response = await session.request(node, ApiKey.OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time": -1,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    })
    for t in response.topics:
        for p in t.partitions:
            _check(p.error_code, f"committing {t.name}-{p.partition_index}")


# -- delete ----------------------------------------------------------------------------------


async def _delete(session: Session, args) -> int:
    for group in await _selected_groups(session, args):
        node = await session.coordinator(group)
        response = await session.request(node, ApiKey.DELETE_GROUPS, {"groups_names": [group]})
        (result,) = response.results
        _check(result.error_code, f"deleting group {group!r}")
        console().print(f"deleted group {group!r}")
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


async def _describe_share(session: Session, group: str, args) -> int:
    node = await session.coordinator(group)
    (described,) = (await session.request_up_to(node, ApiKey.SHARE_GROUP_DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False})).groups
    _check(described.error_code, f"describing share group {group!r}")
    out = console()
    members = list(described.members)
    if args.state:
        # kafka-share-groups.sh --describe --state
        print_table([GROUP_COLUMN, Column("COORDINATOR (ID)", min_width=25),
                     Column("STATE", min_width=10), Column("GROUP-EPOCH", min_width=12),
                     Column("ASSIGNMENT-EPOCH", min_width=17), Column("#MEMBERS")],
                    [(group, f"{session.addresses.get(node, '-')} ({node})",
                      described.group_state, str(described.group_epoch),
                      str(described.assignment_epoch), str(len(members)))], to=out)
        return 0
    if args.members:
        # kafka-share-groups.sh --describe --members
        rows = []
        for m in members:
            assigned = [(tp.topic_name, p) for tp in m.assignment.topic_partitions
                        for p in tp.partitions]
            rows.append((group, m.member_id, m.client_host, m.client_id,
                         str(len(assigned)),
                         ",".join(f"{t}:{p}" for t, p in sorted(assigned)) or "-"))
        print_table([GROUP_COLUMN, Column("CONSUMER-ID", min_width=15),
                     Column("HOST", min_width=15), Column("CLIENT-ID", min_width=15),
                     Column("#PARTITIONS", min_width=12), Column("ASSIGNMENT")], rows, to=out)
        return 0
    # kafka-share-groups.sh --describe (--offsets)
    offsets = await _share_offsets(session, node, group)
    out.print(f"share group [bold]{group}[/bold]: state {described.group_state}, "
              f"{len(members)} member(s)")
    dlq = await _share_dlq(session, node, group)
    if dlq is not None:
        out.print(f"dead-letter topic (KIP-1191): {dlq[0]}, copying records: {dlq[1]}")
    print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN,
                 _offset_column("START-OFFSET"), Column("LAG")],
                [(group, t, str(p), _dash(start if start >= 0 else None),
                  _dash(lag if lag >= 0 else None))
                 for (t, p), (start, lag) in sorted(offsets.items())], to=out)
    return 0


RESOURCE_GROUP = 32


async def _share_dlq(session: Session, node: int, group: str) -> tuple[str, str] | None:
    """(dead-letter topic, copy.record.enable) of a share group (its GROUP configs), None
    when it has none or the broker knows no such configs (before Kafka 4.4)."""
    response = await session.request_up_to(node, ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": RESOURCE_GROUP, "resource_name": group,
                       "configuration_keys": [DLQ_TOPIC_CONFIG, DLQ_COPY_CONFIG]}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = response.results
    if result.error_code != ErrorCode.none:
        return None
    values = {c.name: c.value for c in result.configs}
    if not values.get(DLQ_TOPIC_CONFIG):
        return None
    return values[DLQ_TOPIC_CONFIG], values.get(DLQ_COPY_CONFIG) or "false"


async def _alter_share_offsets(session: Session, group: str,
                               new: dict[tuple[str, int], int]) -> None:
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


async def _delete_offsets(session: Session, args) -> int:
    for group in await _selected_groups(session, args):
        await _delete_share_offsets(session, group, args.topic)
    return 0


async def _delete_share_offsets(session: Session, group: str, topics: list[str]) -> None:
    if not await is_share_group(session, group):
        raise GroupsToolError(f"{group!r} is not a share group (delete-offsets forgets "
                              "a share group's state of whole topics)")
    node = await session.coordinator(group)
    response = await session.request_up_to(node, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
        "group_id": group, "topics": [{"topic_name": t} for t in topics]})
    _check(response.error_code, f"deleting the offsets of share group {group!r}")
    for t in response.responses:
        _check(t.error_code, f"deleting the offsets of {t.topic_name}")
    console().print(f"deleted the state of {', '.join(topics)} in share group {group!r}")
