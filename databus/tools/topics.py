"""``databus topics``: create, delete, list, describe and alter topics (like kafka-topics.sh).

    databus topics create   --bootstrap-server HOST:PORT --topic T [--partitions N]
                            [--replication-factor R] [--config K=V ...] [--if-not-exists]
    databus topics delete   --bootstrap-server HOST:PORT --topic T [--if-exists]
    databus topics list     --bootstrap-server HOST:PORT [--exclude-internal] [--json]
    databus topics describe --bootstrap-server HOST:PORT [--topic T] [--if-exists] [--json]
    databus topics alter    --bootstrap-server HOST:PORT --topic T [--partitions N]
                            [--config K=V ...] [--delete-config K ...] [--if-exists]
    databus topics delete-records --bootstrap-server HOST:PORT
                            (--offset-json-file FILE | --topic T [--partition P ...] --offset N)

Kafka's flag spelling of the action works too (``databus topics --create --topic T``), and
``--bootstrap`` is an alias of ``--bootstrap-server``.  ``alter --partitions`` grows a topic
(CreatePartitions); ``alter --config``/``--delete-config`` set and remove overrides
(IncrementalAlterConfigs, as kafka-configs.sh --alter --add-config/--delete-config does).
``describe`` lists only the configs that differ from the broker's defaults, as Kafka does.
``delete-records`` deletes every record below an offset (DeleteRecords: the log start offset
moves), as kafka-delete-records.sh: its ``--offset-json-file`` (``{"partitions": [{"topic":
"t", "partition": 0, "offset": 5}], "version": 1}``, offset -1 = up to the high watermark), or
``--topic`` with ``--offset`` for all (or the ``--partition``) partitions of it.

Exit status: 0 done, 1 the cluster refused (the error is printed), 2 bad usage.
"""

from __future__ import annotations

import sys

from databus.cli_helpers.options import (
    add_bootstrap,
    add_command_config,
    add_json,
    client_settings,
    print_json,
)

ACTIONS = ("create", "delete", "list", "describe", "alter", "delete-records")


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=ACTIONS)
    add_bootstrap(parser)
    parser.add_argument("--topic", action="append", default=[], help="topic name (repeatable)")
    parser.add_argument("--partitions", type=int, default=-1,
                        help="create: partitions of the new topic (default: the broker's "
                             "num.partitions); alter: the new, larger count")
    parser.add_argument("--replication-factor", type=int, default=-1)
    parser.add_argument("--config", action="append", default=[], metavar="K=V",
                        help="create: a config of the new topic; alter: a config to set "
                             "(repeatable)")
    parser.add_argument("--delete-config", action="append", default=[], metavar="K",
                        help="alter: remove this override, back to the default (repeatable)")
    parser.add_argument("--offset-json-file", metavar="FILE",
                        help="delete-records: kafka-delete-records.sh's JSON of partitions "
                             "and offsets")
    parser.add_argument("--partition", type=int, action="append", default=[],
                        help="delete-records: a partition of --topic (repeatable; default all)")
    parser.add_argument("--offset", type=int, default=None,
                        help="delete-records: delete the records below this offset of "
                             "--topic (-1: every record up to the high watermark)")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="create: do nothing (and succeed) for a topic that exists")
    parser.add_argument("--if-exists", action="store_true",
                        help="alter, delete, describe: do nothing for a topic that is missing")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="describe: leave out internal topics (list never shows them)")
    add_json(parser)
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="give up after this long (default 30), naming the address")
    add_command_config(parser)


def _usage_error(args) -> str | None:
    if args.action in ("create", "delete", "alter") and not args.topic:
        return "--topic is required"
    if args.action == "alter" and args.partitions < 0 and not args.config \
            and not args.delete_config:
        return "alter needs --partitions N, --config K=V or --delete-config K"
    if args.if_not_exists and args.action != "create":
        return "--if-not-exists only applies to create"
    if args.if_exists and args.action not in ("alter", "delete", "describe"):
        return "--if-exists only applies to alter, delete and describe"
    if args.delete_config and args.action != "alter":
        return "--delete-config only applies to alter"
    if args.action == "delete-records":
        if bool(args.offset_json_file) == (args.offset is not None):
            return "delete-records needs --offset-json-file FILE or --topic T --offset N"
        if args.offset is not None and len(args.topic) != 1:
            return "--offset applies to exactly one --topic"
    elif args.offset_json_file or args.offset is not None or args.partition:
        return "--offset-json-file, --offset and --partition only apply to delete-records"
    return None


def offsets_from_json(text: str, source: str) -> dict[tuple[str, int], int]:
    """kafka-delete-records.sh's --offset-json-file: {(topic, partition): offset}; ValueError
    naming the problem (and ``source``) when it is not that shape."""
    import json

    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not JSON: {exc}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'{source}: expected {{"partitions": [{{"topic": ..., "partition": '
                         f'..., "offset": ...}}, ...], "version": 1}}')
    wanted: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(entries):
        try:
            tp = (str(entry["topic"]), int(entry["partition"]))
            offset = int(entry["offset"])
        except (TypeError, KeyError, ValueError):
            raise ValueError(f"{source}: partitions[{i}] needs topic, partition and an integer "
                             f"offset, got {entry!r}") from None
        if tp in wanted:
            raise ValueError(f"{source}: partition {tp[0]}-{tp[1]} is listed twice")
        wanted[tp] = offset
    return wanted


def run(args) -> int:
    import trio

    from databus.client import AdminConfig, KafkaError, parse_overrides

    try:
        settings = {"request.timeout.ms": int(args.timeout * 1000), **client_settings(args)}
        config = AdminConfig.from_kafka(settings)
        topic_configs = parse_overrides(args.config)
    except KafkaError as exc:
        print(f"databus topics: {exc}", file=sys.stderr)
        return 2
    problem = _usage_error(args)
    if problem:
        print(f"databus topics {args.action}: {problem}", file=sys.stderr)
        return 2
    try:
        return trio.run(_run, args, config, topic_configs)
    except KafkaError as exc:
        print(f"databus topics: {exc}", file=sys.stderr)
        return 1
    except trio.TooSlowError:
        print(f"databus topics: no answer from {args.bootstrap} within {args.timeout:g}s",
              file=sys.stderr)
        return 1


async def _run(args, config, topic_configs) -> int:
    import trio

    with trio.fail_after(args.timeout):
        return await _with_admin(args, config, topic_configs)


async def _with_admin(args, config, topic_configs) -> int:
    from databus.client import Admin

    async with Admin(args.bootstrap, config) as admin:
        if args.action == "list":
            names = await admin.list_topics()
            if args.json:
                print_json({"topics": names})
            else:
                for name in names:
                    print(name)
            return 0
        if args.action == "create":
            results = await admin.create_topics(
                {t: args.partitions for t in args.topic},
                replication_factor=args.replication_factor, configs=topic_configs,
            )
            if args.if_not_exists:
                results = {t: e for t, e in results.items()
                           if not (e is not None and e.name == "TOPIC_ALREADY_EXISTS")}
            return _report(results, "Created topic")
        if args.action == "delete":
            names = await _existing(admin, args) if args.if_exists else args.topic
            return _report(await admin.delete_topics(names) if names else {}, "Deleted topic")
        if args.action == "alter":
            return await _alter(admin, args, topic_configs)
        if args.action == "delete-records":
            return await _delete_records(admin, args)
        return await _describe(admin, args)


async def _existing(admin, args) -> list[str]:
    """The named topics that exist (--if-exists: the missing ones are skipped silently)."""
    described = await admin.describe_topics(args.topic)
    return [t for t in args.topic if not isinstance(described.get(t), Exception)]


async def _alter(admin, args, topic_configs) -> int:
    names = await _existing(admin, args) if args.if_exists else args.topic
    status = 0
    if args.partitions >= 0 and names:
        results = await admin.create_partitions({t: args.partitions for t in names})
        status = _report(results, "Altered partitions of topic")
    if topic_configs or args.delete_config:
        for name in names:
            error = await admin.incremental_alter_configs(name, topic_configs,
                                                          args.delete_config)
            status = max(status, _report({name: error}, "Altered configs of topic"))
    return status


async def _delete_records(admin, args) -> int:
    if args.offset_json_file:
        try:
            with open(args.offset_json_file, encoding="utf-8") as f:
                wanted = offsets_from_json(f.read(), args.offset_json_file)
        except (OSError, ValueError) as exc:
            print(f"databus topics delete-records: {exc}", file=sys.stderr)
            return 2
    else:
        (topic,) = args.topic
        partitions = args.partition
        if not partitions:
            described = (await admin.describe_topics([topic]))[topic]
            if isinstance(described, Exception):
                print(f"Error for topic {topic}: {described}", file=sys.stderr)
                return 1
            partitions = [p.partition for p in described.partitions]
        wanted = {(topic, p): args.offset for p in partitions}
    print("Executing records delete operation")
    results = await admin.delete_records(wanted)
    print("Records delete operation completed:")
    status = 0
    for (topic, partition), result in sorted(results.items()):
        if isinstance(result, Exception):
            print(f"partition: {topic}-{partition}\terror: {result}")
            status = 1
        else:
            print(f"partition: {topic}-{partition}\tlow_watermark: {result}")
    return status


def topic_document(desc, entries) -> dict:
    """A topic as --json prints it (fields documented in docs/cli.md)."""
    return {
        "name": desc.name,
        "topic_id": str(desc.topic_id) if desc.topic_id is not None else None,
        "partition_count": len(desc.partitions),
        "replication_factor": len(desc.partitions[0].replicas) if desc.partitions else 0,
        "configs": _overrides(entries),
        "partitions": [{"partition": p.partition, "leader": p.leader,
                        "replicas": list(p.replicas), "isr": list(p.isr)}
                       for p in desc.partitions],
    }


def _overrides(entries) -> dict[str, str | None]:
    """The configs that differ from the defaults (as kafka-topics.sh --describe shows)."""
    if not isinstance(entries, dict):
        return {}
    return {k: e.value for k, e in sorted(entries.items()) if not e.is_default}


async def _describe(admin, args) -> int:
    described = await admin.describe_topics(args.topic or None)
    if args.if_exists:
        described = {n: d for n, d in described.items() if not isinstance(d, Exception)}
    if args.exclude_internal:
        described = {n: d for n, d in described.items() if not getattr(d, "is_internal", False)}
    found = [n for n, d in described.items() if not isinstance(d, Exception)]
    configs = await admin.describe_configs(found) if found else {}
    status = 0
    documents, failures = [], {}
    for name, desc in sorted(described.items()):
        if isinstance(desc, Exception):
            failures[name] = str(desc)
            print(f"Error describing topic {name}: {desc}", file=sys.stderr)
            status = 1
            continue
        doc = topic_document(desc, configs.get(name))
        documents.append(doc)
        if args.json:
            continue
        shown = ",".join(f"{k}={v}" for k, v in doc["configs"].items())
        print(f"Topic: {name}\tTopicId: {doc['topic_id']}\tPartitionCount: "
              f"{doc['partition_count']}\tReplicationFactor: {doc['replication_factor']}"
              f"\tConfigs: {shown}")
        for p in doc["partitions"]:
            print(f"\tTopic: {name}\tPartition: {p['partition']}\tLeader: {p['leader']}"
                  f"\tReplicas: {','.join(map(str, p['replicas']))}"
                  f"\tIsr: {','.join(map(str, p['isr']))}")
    if args.json:
        print_json({"topics": documents, "errors": failures})
    return status


def _report(results, verb: str) -> int:
    status = 0
    for name, error in sorted(results.items()):
        if error is None:
            print(f"{verb} {name}.")
        else:
            print(f"Error for topic {name}: {error}", file=sys.stderr)
            status = 1
    return status
