"""``databus groups``: list, describe, reset the offsets of, and delete consumer groups and
share groups (KIP-932).

Like Kafka's kafka-consumer-groups.sh and kafka-share-groups.sh, it talks to a broker over
the Kafka protocol (``--bootstrap-server HOST:PORT``, alias ``--bootstrap``; any
Kafka-compatible cluster works), through databus's own client; what it reads and changes is
``databus.groups``'s (shared with the web console), this module is the command line over it:

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
import sys
import time

from databus.cli_helpers.options import (
    DEFAULT_BOOTSTRAP,
    add_command_config,
    add_json,
    client_settings,
    print_json,
)
from databus.cli_helpers.table import Column, console, print_table
from databus.cli_helpers.times import parse_datetime, parse_duration
from databus.groups import (
    GroupsError,
    ResetRequest,
    Session,
    delete_group,
    delete_share_offsets,
    describe_share_group,
    execute_group_reset,
    group_document,
    is_share_group,
    list_group_states,
    load_group,
    plan_group_reset,
    share_dlq,
    share_offsets,
)

ACTIONS = ("list", "describe", "reset-offsets", "delete", "delete-offsets")


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
            args.request = reset_request(args)
        return trio.run(_with_session, actions[args.action], args)
    except (GroupsError, KafkaError, ValueError) as exc:
        print(f"databus groups: {exc}", file=sys.stderr)
        return 1
    except trio.TooSlowError:
        print(f"databus groups: no answer from {args.bootstrap} within {args.timeout:g}s",
              file=sys.stderr)
        return 1


def reset_request(args) -> ResetRequest:
    """reset-offsets' options as databus.groups' ResetRequest."""
    timestamp = parse_datetime(args.to_datetime) if args.to_datetime else None
    if args.by_duration:
        timestamp = int(time.time() * 1000) - parse_duration(args.by_duration)
    return ResetRequest(topic_partitions=[parse_topic(t) for t in args.topic or ()],
                        all_topics=args.all_topics, to_earliest=args.to_earliest,
                        to_latest=args.to_latest, to_current=args.to_current,
                        to_offset=args.to_offset, timestamp=timestamp, shift_by=args.shift_by)


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


# Kafka's kafka-consumer-groups.sh column widths (%-15s, %-10s ...), so piped output lines up
# as its output does and scripts written against it find the same fields.
GROUP_COLUMN, TOPIC_COLUMN = Column("GROUP", min_width=15), Column("TOPIC", min_width=15)
PARTITION_COLUMN = Column("PARTITION", min_width=10)


def _offset_column(header: str) -> Column:
    return Column(header, min_width=15)


# -- list ------------------------------------------------------------------------------------


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


# -- describe --------------------------------------------------------------------------------


async def _describe(session: Session, args) -> int:
    status, documents = 0, []
    out = console()
    for n, group in enumerate(await _selected_groups(session, args)):
        if await is_share_group(session, group):
            if args.json:
                raise GroupsError(f"--json does not describe share groups yet ({group!r} "
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


async def _reset(session: Session, args) -> int:
    groups = await _selected_groups(session, args)
    plans = [(group, *await plan_group_reset(session, group, args.request)) for group in groups]

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


# -- delete ----------------------------------------------------------------------------------


async def _delete(session: Session, args) -> int:
    for group in await _selected_groups(session, args):
        await delete_group(session, group)
        console().print(f"deleted group {group!r}")
    return 0


async def _describe_share(session: Session, group: str, args) -> int:
    node, described = await describe_share_group(session, group)
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
    offsets = await share_offsets(session, node, group)
    out.print(f"share group [bold]{group}[/bold]: state {described.group_state}, "
              f"{len(members)} member(s)")
    dlq = await share_dlq(session, node, group)
    if dlq is not None:
        out.print(f"dead-letter topic (KIP-1191): {dlq[0]}, copying records: {dlq[1]}")
    print_table([GROUP_COLUMN, TOPIC_COLUMN, PARTITION_COLUMN,
                 _offset_column("START-OFFSET"), Column("LAG")],
                [(group, t, str(p), _dash(start if start >= 0 else None),
                  _dash(lag if lag >= 0 else None))
                 for (t, p), (start, lag) in sorted(offsets.items())], to=out)
    return 0


async def _delete_offsets(session: Session, args) -> int:
    for group in await _selected_groups(session, args):
        await delete_share_offsets(session, group, args.topic)
        console().print(f"deleted the state of {', '.join(args.topic)} in share group "
                        f"{group!r}")
    return 0
