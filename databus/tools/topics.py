"""``databus topics``: create, delete, list and describe topics (like kafka-topics.sh).

    databus topics create   --bootstrap HOST:PORT --topic T [--partitions N]
                            [--replication-factor R] [--config K=V ...]
    databus topics delete   --bootstrap HOST:PORT --topic T
    databus topics list     --bootstrap HOST:PORT
    databus topics describe --bootstrap HOST:PORT [--topic T]

Exit status: 0 done, 1 the cluster refused (the error is printed), 2 bad usage.
"""

from __future__ import annotations

import sys

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["create", "delete", "list", "describe"])
    parser.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
    parser.add_argument("--topic", action="append", default=[], help="topic name (repeatable)")
    parser.add_argument("--partitions", type=int, default=-1,
                        help="partitions of a new topic (default: the broker's num.partitions)")
    parser.add_argument("--replication-factor", type=int, default=-1)
    parser.add_argument("--config", action="append", default=[], metavar="K=V",
                        help="topic config of a new topic (repeatable)")
    parser.add_argument("-X", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="admin client setting by Kafka's name (repeatable)")


def run(args) -> int:
    import trio

    from databus.client import AdminConfig, KafkaError, parse_overrides

    try:
        config = AdminConfig.from_kafka(parse_overrides(args.overrides))
        topic_configs = parse_overrides(args.config)
    except KafkaError as exc:
        print(f"databus topics: {exc}", file=sys.stderr)
        return 2
    if args.action in ("create", "delete") and not args.topic:
        print(f"databus topics {args.action}: --topic is required", file=sys.stderr)
        return 2
    try:
        return trio.run(_run, args, config, topic_configs)
    except KafkaError as exc:
        print(f"databus topics: {exc}", file=sys.stderr)
        return 1


async def _run(args, config, topic_configs) -> int:
    from databus.client import Admin

    async with Admin(args.bootstrap, config) as admin:
        if args.action == "list":
            for name in await admin.list_topics():
                print(name)
            return 0
        if args.action == "create":
            results = await admin.create_topics(
                {t: args.partitions for t in args.topic},
                replication_factor=args.replication_factor, configs=topic_configs,
            )
            return _report(results, "Created topic")
        if args.action == "delete":
            return _report(await admin.delete_topics(args.topic), "Deleted topic")
        described = await admin.describe_topics(args.topic or None)
        configs = await admin.describe_configs([n for n, d in described.items() if not isinstance(d, Exception)])
        status = 0
        for name, desc in sorted(described.items()):
            if isinstance(desc, Exception):
                print(f"Error describing topic {name}: {desc}", file=sys.stderr)
                status = 1
                continue
            entries = configs.get(name)
            shown = ""
            if isinstance(entries, dict):
                shown = ",".join(f"{k}={e.value}" for k, e in sorted(entries.items()) if not e.is_default)
            rf = len(desc.partitions[0].replicas) if desc.partitions else 0
            print(f"Topic: {name}\tTopicId: {desc.topic_id}\tPartitionCount: {len(desc.partitions)}"
                  f"\tReplicationFactor: {rf}\tConfigs: {shown}")
            for p in desc.partitions:
                print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader}"
                      f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
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
