"""``databus verify``: run Jepsen's Kafka queue workload under faults and check the history.

    databus verify [--time 60] [--seed N] [--faults kill,pause,hang-kill]
                   [--bootstrap-server HOST:PORT] [--history FILE] [--unsafe acks0|no-idempotence]

Without ``--bootstrap`` it starts the built-in broker in a temporary directory and the
nemesis kills and pauses it on a schedule the seed fixes; with ``--bootstrap`` it runs
against that cluster and injects no faults (use your own).  Prints the verdict per anomaly
class with examples; exit status 0 when valid, 1 when an anomaly was found, 2 when the run
itself could not be made.
"""

from __future__ import annotations

import logging
import random
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from .checker import DEFAULT_ALLOW, check, format_verdict
from .nemesis import (
    KINDS,
    Nemesis,
    available_kinds,
    heal,
    mount_small_disk,
    schedule,
    unavailable,
    unmount,
)
from .workload import UNSAFE, QueueOptions, Recorder, run_queue

log = logging.getLogger("databus.verify")


def add_arguments(parser) -> None:
    parser.add_argument("--workload", choices=["queue", "pipeline"], default="queue",
                        help="queue (default): Jepsen's Kafka queue against a broker; pipeline: "
                             "the SDK's sends through `databus up` (sidecar and built-in "
                             "broker), the faults hitting the sidecar process")
    parser.add_argument("--stages", action="store_true",
                        help="pipeline: also run a mirror (to a second broker) and a Parquet "
                             "sink in the `databus up` process, and check what they hold; the "
                             "faults then hit that process, not the brokers")
    parser.add_argument("--time", type=float, default=60.0, metavar="SECONDS",
                        help="how long the clients run, faults included (default 60)")
    parser.add_argument("--seed", type=int, default=None,
                        help="fixes the fault schedule and the clients' choices (default: random, "
                             "printed with the verdict)")
    parser.add_argument("--faults", default=None,
                        help=f"comma-separated fault kinds among {', '.join(KINDS)}; "
                             "'none' for none (default: all that can run here: partition "
                             "needs root and iptables, disk-full root, clock libfaketime)")
    parser.add_argument("--bootstrap", "--bootstrap-server", dest="bootstrap", metavar="HOST:PORT",
                        help="an existing Kafka cluster (no faults injected); default: start the "
                             "built-in broker")
    parser.add_argument("--topic", default=None, help="topic to use (default verify-SEED)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=200.0,
                        help="records/s of each idempotent producer (default 200)")
    parser.add_argument("--pause-seconds", type=float, default=8.0,
                        help="length of a SIGSTOP pause or a partition (default 8: past the "
                             "consumers' 6 s session timeout)")
    parser.add_argument("--disk-size", default="64m", metavar="SIZE",
                        help="disk-full: the size of the tmpfs mounted as the broker's data "
                             "dir (mount's syntax; default 64m)")
    parser.add_argument("--recover", type=float, default=10.0, metavar="SECONDS",
                        help="how long the clients go on after the faults are healed, before "
                             "the final drain (default 10)")
    parser.add_argument("--history", metavar="FILE",
                        help="write the history here as JSON lines (default: the run's directory)")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="the built-in broker's directory (default: a temporary one, kept "
                             "when the verdict is invalid)")
    parser.add_argument("--transaction-version", type=int, choices=(1, 2), default=2,
                        help="the started broker's transaction.version (KIP-890): 2 (the "
                             "default) puts databus's transactional producer on transactions "
                             "v2, 1 keeps it on v1; confluent-kafka speaks v1 either way")
    parser.add_argument("--unsafe", choices=UNSAFE,
                        help="a deliberately broken producer setup, to see the checker fail: "
                             "acks0 (lost writes under hang-kill), no-idempotence (duplicates), "
                             "mirror-at-least-once (pipeline --stages: the mirror's duplicates "
                             "under kill)")
    parser.add_argument("--allow", default="", help="anomaly classes this setup documents "
                        "(comma-separated; G0 is always allowed: Kafka does not prevent it)")


def run(args) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    if args.faults is None:
        kinds = [] if args.bootstrap else list(available_kinds())
    else:
        kinds = [] if args.faults == "none" else [k for k in args.faults.split(",") if k]
    if args.workload == "pipeline" and {"disk-full", "clock"} & set(kinds):
        print("databus verify: the disk-full and clock faults hit the queue workload's broker "
              "(the pipeline's faults hit its `databus up` process)", file=sys.stderr)
        return 2
    for kind in kinds:
        if kind in KINDS and (why := unavailable(kind)):
            print(f"databus verify: {why}", file=sys.stderr)
            return 2
    try:
        faults = schedule(seed, args.time, kinds, pause_seconds=args.pause_seconds)
    except ValueError as exc:
        print(f"databus verify: {exc}", file=sys.stderr)
        return 2
    if args.bootstrap and args.workload == "pipeline":
        print("databus verify: the pipeline workload starts its own `databus up` "
              "(no --bootstrap)", file=sys.stderr)
        return 2
    if args.bootstrap and faults:
        print("databus verify: --bootstrap runs against your cluster: no faults are injected "
              "(pass --faults none to say so)", file=sys.stderr)
        return 2
    allow = set(DEFAULT_ALLOW) | {a for a in args.allow.split(",") if a}
    with ExitStack() as stack:
        if args.data_dir:
            root = Path(args.data_dir)
        else:
            root = Path(tempfile.mkdtemp(prefix="databus-verify-"))
        root.mkdir(parents=True, exist_ok=True)
        history_path = Path(args.history) if args.history else root / "history.jsonl"
        sink = stack.enter_context(open(history_path, "w"))
        rec = Recorder(sink)
        broker = None
        bootstrap = args.bootstrap
        topic = args.topic or f"verify-{seed}"
        extra: dict[str, str] = {}
        producer_class = None
        target = None
        if args.workload == "pipeline":
            from databus.broker.process import BrokerProcess

            from .pipeline import SdkProducer, UpProcess, short_dir

            stages = None
            if args.stages:
                # the source and the mirror's target: built-in brokers out of the nemesis'
                # reach, which hits the `databus up` running the sidecar, mirror and sink
                brokers = []
                for name in ("source", "target"):
                    b = BrokerProcess(root / name, {"num.partitions": args.partitions})
                    b.start()
                    stack.callback(b.close)
                    brokers.append(b.bootstrap)
                stages = (brokers[0], brokers[1])
                target = brokers[1]
            sock_dir = short_dir()
            broker = UpProcess(root / "up", sock_dir, topic, args.partitions, stages,
                               mirror_exactly_once=args.unsafe != "mirror-at-least-once")
            extra["socket"] = broker.socket_path
            producer_class = SdkProducer
            broker.start()
            stack.callback(broker.close)
            bootstrap = broker.bootstrap
        elif bootstrap is None:
            from databus.broker.process import BrokerProcess

            broker = BrokerProcess(root / "broker", {
                "num.partitions": args.partitions,
                "transaction.version": args.transaction_version})
            if "disk-full" in kinds:
                try:
                    mount_small_disk(broker.data_dir, args.disk_size)
                except OSError as exc:
                    print(f"databus verify: {exc}", file=sys.stderr)
                    return 2
                stack.callback(unmount, broker.data_dir)  # after the broker's close
            broker.start()
            stack.callback(broker.close)
            bootstrap = broker.bootstrap
        opts = QueueOptions(bootstrap=bootstrap, topic=topic, partitions=args.partitions,
                            seed=seed, rate=args.rate, unsafe=args.unsafe,
                            recover=args.recover, extra=extra)
        nemesis = None
        if broker is not None and faults:
            nemesis = Nemesis(broker, faults, lambda what, text: rec.event(
                "nemesis", "nemesis", fault=f"{what}: {text}"))

        def stop_nemesis():
            nemesis.join()
            heal(broker)
            if nemesis.error is not None:
                raise nemesis.error

        print(f"databus verify: {args.workload} workload on {bootstrap}, {args.time:g}s, seed {seed}, "
              f"faults: {', '.join(f'{f.kind}@{f.start:g}s' for f in faults) or 'none'}",
              flush=True)
        started = time.monotonic()
        workers = run_queue(opts, rec, args.time,
                            nemesis.start if nemesis else None,
                            stop_nemesis if nemesis else None, producer_class)
        sink.flush()
        verdict = check(rec.ops, allow=allow)
        broken = sum(w.errors for w in workers)
        print(format_verdict(verdict, seed=seed, header=(
            f"ran {time.monotonic() - started:.0f}s; clients replaced after errors: {broken}; "
            f"history: {history_path}")), flush=True)
        stages_valid = True
        if target is not None:
            from .pipeline import check_stages

            stages_valid, text = check_stages(broker, target, topic, rec.ops, allow)
            print(text, flush=True)
        return 0 if verdict.valid and stages_valid else 1
