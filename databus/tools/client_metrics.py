"""``databus client-metrics``: client-metrics subscriptions (KIP-714), with the options of
Kafka's kafka-client-metrics.sh.

    databus client-metrics --bootstrap-server HOST:PORT --alter --name N
                           [--metrics PREFIX,...] [--interval MS] [--match KEY=REGEX,...]
    databus client-metrics ... --alter --generate-name --metrics ...
    databus client-metrics ... --alter --name N --block       # push nothing
    databus client-metrics ... --describe [--name N] [--json]
    databus client-metrics ... --delete --name N
    databus client-metrics ... --list

A subscription is a CLIENT_METRICS config resource (IncrementalAlterConfigs, type 16):
``metrics`` (name prefixes, ``*`` for all), ``interval.ms`` (push interval, 100..3600000)
and ``match`` (``client_id``, ``client_instance_id``, ``client_software_name``,
``client_software_version``, ``client_source_address``, ``client_source_port`` = a regex
the whole value must match).  ``--alter`` sets only what it is given; ``--match`` may be
repeated.  The clients' pushed metrics appear on the broker's ``/metrics``
(docs/client-metrics.md).

Exit status: 0 done, 1 the broker refused (the error named), 2 bad usage.
"""

from __future__ import annotations

import sys
import uuid

from databus.cli_helpers.options import (
    add_bootstrap,
    add_command_config,
    add_json,
    client_settings,
    print_json,
    run_admin,
)

CLIENT_METRICS = 16
OP_SET, OP_DELETE = 0, 1
CONFIGS = ("metrics", "interval.ms", "match")


def add_arguments(parser) -> None:
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true",
                        help="create or change a subscription")
    action.add_argument("--describe", action="store_true",
                        help="show one subscription (--name) or all of them")
    action.add_argument("--delete", action="store_true", help="delete a subscription")
    action.add_argument("--list", action="store_true", help="list the subscriptions' names")
    parser.add_argument("--name", help="the subscription's name")
    parser.add_argument("--generate-name", action="store_true",
                        help="--alter: name the new subscription with a random UUID")
    parser.add_argument("--metrics", metavar="PREFIX,...",
                        help="metric name prefixes to push ('*': all; '': none)")
    parser.add_argument("--block", action="store_true",
                        help="--alter: the matching clients push no metrics")
    parser.add_argument("--interval", type=int, metavar="MS",
                        help="push interval in ms (100..3600000; default 300000)")
    parser.add_argument("--match", action="append", default=[], metavar="KEY=REGEX,...",
                        help="client selector(s): client_id, client_instance_id, "
                             "client_software_name, client_software_version, "
                             "client_source_address, client_source_port (repeatable)")
    add_command_config(parser)
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="give up after this long (default 30)")
    add_json(parser)


def _usage(args) -> str | None:
    """What is wrong with the option combination, or None."""
    changes = args.metrics is not None or args.interval is not None or args.match or args.block
    if args.alter:
        if bool(args.name) == args.generate_name:
            return "--alter needs exactly one of --name and --generate-name"
        if args.block and args.metrics is not None:
            return "--block and --metrics exclude each other"
        if not changes:
            return "--alter needs --metrics, --interval, --match or --block"
    elif changes or args.generate_name:
        return "--metrics, --interval, --match, --block and --generate-name go with --alter"
    if args.delete and not args.name:
        return "--delete needs --name"
    if args.list and args.name:
        return "--list takes no --name"
    return None


def _alter_ops(args) -> list[tuple[str, int, str | None]]:
    ops: list[tuple[str, int, str | None]] = []
    if args.block:
        ops.append(("metrics", OP_SET, ""))
    elif args.metrics is not None:
        ops.append(("metrics", OP_SET, args.metrics))
    if args.interval is not None:
        ops.append(("interval.ms", OP_SET, str(args.interval)))
    if args.match:
        ops.append(("match", OP_SET, ",".join(args.match)))
    return ops


def run(args) -> int:
    problem = _usage(args)
    if problem:
        print(f"databus client-metrics: {problem}", file=sys.stderr)
        return 2
    import trio

    from databus.client import AdminConfig, KafkaError

    try:
        config = AdminConfig.from_kafka({"request.timeout.ms": int(args.timeout * 1000),
                                         **client_settings(args)})
    except KafkaError as exc:
        print(f"databus client-metrics: {exc}", file=sys.stderr)
        return 2
    name = args.name or (str(uuid.uuid4()) if args.generate_name else None)

    async def main() -> int:
        from databus.client import Admin

        with trio.fail_after(args.timeout):
            async with Admin(args.bootstrap, config) as admin:
                if args.alter:
                    await admin.alter_config_resource(CLIENT_METRICS, name, _alter_ops(args))
                    print(f"Altered client metrics config for {name}.")
                    return 0
                if args.delete:
                    if not await admin.describe_config_resource(CLIENT_METRICS, name):
                        print(f"databus client-metrics: no subscription named {name!r}",
                              file=sys.stderr)
                        return 1
                    await admin.alter_config_resource(
                        CLIENT_METRICS, name, [(key, OP_DELETE, None) for key in CONFIGS])
                    print(f"Deleted client metrics config for {name}.")
                    return 0
                names = await admin.list_config_resources((CLIENT_METRICS,))
                if args.list:
                    if args.json:
                        print_json({"subscriptions": names})
                    else:
                        print("\n".join(names))
                    return 0
                if name is not None:
                    if name not in names:
                        print(f"databus client-metrics: no subscription named {name!r}",
                              file=sys.stderr)
                        return 1
                    names = [name]
                described = {n: await admin.describe_config_resource(CLIENT_METRICS, n)
                             for n in names}
                if args.json:
                    print_json({"subscriptions": [
                        {"name": n, "configs": {k: e.value for k, e in sorted(entries.items())}}
                        for n, entries in described.items()]})
                    return 0
                for n, entries in described.items():
                    print(f"Client metrics configs for {n} are:")
                    for key, entry in sorted(entries.items()):
                        print(f"  {key}={entry.value}")
                return 0

    return run_admin("client-metrics", main, args)
