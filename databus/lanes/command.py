"""``databus lanes``: create, list, extend and delete swimlanes (docs/lanes.md).

Works against any Kafka cluster: it reads and writes the registry topic and the lane topics
with databus.client's public surface.  The cluster, the registry topic and the lane topic
template come from ``-c sidecar.yaml`` (its ``lanes:``) when given (or ./sidecar.yaml
exists), else from the flags.
"""

from __future__ import annotations

import re
import sys

PROG = "databus lanes"
ACTIONS = ("create", "list", "extend", "delete")

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``90s``, ``30m``, ``2h``, ``1d``, ``500ms``, ``1h30m``, or plain milliseconds."""
    t = text.strip().lower()
    if t.isdigit():
        return int(t)
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise ValueError(f"{text!r} is not a duration (e.g. 2h, 30m, 90s, 1h30m, 500ms)")
    total = sum(int(n) * _UNITS[u] for n, u in parts)
    if total <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    return total


def add_arguments(parser) -> None:
    from databus.cli_helpers.options import add_json

    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create a lane that expires after --ttl")
    create.add_argument("lane", metavar="NAME")
    create.add_argument("--ttl", default="2h", help="lifetime (default 2h): 90s, 30m, 2h, 1d")
    create.add_argument("--partitions", type=int, default=1,
                        help="partitions of each lane topic (default 1)")
    create.add_argument("--retention", default="6h",
                        help="retention.ms of each lane topic (default 6h)")
    create.add_argument("--owner", default=None, help="who owns it (default: USER@host)")
    lst = sub.add_parser("list", help="lanes: age, expiry, topics, live consumers")
    add_json(lst)
    extend = sub.add_parser("extend", help="make a lane expire --ttl from now")
    extend.add_argument("lane", metavar="NAME")
    extend.add_argument("--ttl", default="2h", help="new lifetime from now (default 2h)")
    delete = sub.add_parser("delete", help="delete a lane and its topics")
    delete.add_argument("lane", metavar="NAME")
    delete.add_argument("--merge", action="store_true",
                        help="first copy each lane topic's messages into its main topic")
    for p in (create, lst, extend, delete):
        p.add_argument("-c", "--config", default=None,
                       help="sidecar.yaml whose `lanes:` to use (default: ./sidecar.yaml if "
                       "present)")
        p.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", default=None,
                       help="HOST:PORT of the cluster (default: the lanes cluster of the file, "
                       "else 127.0.0.1:9092)")


def _settings(args):
    """(bootstrap, LanesConfig) from the file and the flags."""
    from databus.cli_helpers.options import DEFAULT_BOOTSTRAP
    from databus.config import ConfigError, find_config, load_config, part_bootstrap
    from databus.lanes.config import LanesConfig

    path = find_config(args.config)
    lanes, bootstrap = LanesConfig(), None
    if path is not None:
        config = load_config(path)
        lanes = config.lanes or lanes
        if args.bootstrap is None:
            try:
                bootstrap = part_bootstrap(config, lanes.cluster, "lanes")
            except ConfigError:
                if config.clusters:
                    raise
                # the built-in broker on port 0: Kafka's usual address, as without a file
    return args.bootstrap or bootstrap or DEFAULT_BOOTSTRAP, lanes


def run(args) -> int:
    import trio

    from databus.client import KafkaError
    from databus.config import ConfigError

    from .model import check_lane_name

    try:  # bad usage: exit 2, nothing asked of the cluster
        bootstrap, lanes = _settings(args)
        if args.action != "list":
            check_lane_name(args.lane)
        for name in ("ttl", "retention"):
            if hasattr(args, name):
                setattr(args, f"{name}_ms", parse_duration_ms(getattr(args, name)))
        if getattr(args, "partitions", 1) < 1:
            raise ValueError("--partitions must be at least 1")
    except (ValueError, ConfigError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        return trio.run(globals()[f"_{args.action}"], args, bootstrap, lanes)
    except (ValueError, KafkaError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


async def _create(args, bootstrap, lanes) -> int:
    from databus.client import Admin

    from . import model
    from .registry import RegistryWriter, default_owner, ensure_registry_topic, now_ms

    ttl, retention = args.ttl_ms, args.retention_ms
    async with Admin(bootstrap) as admin:
        await ensure_registry_topic(admin, lanes.registry_topic)
    state = await _read(bootstrap, lanes)
    existing = state.lanes.get(args.lane)
    if existing is not None:
        now = now_ms()
        what = (f"expires in {_ago(existing.expires - now)}" if existing.live(now)
                else "expired, cleanup pending")
        raise ValueError(f"lane {args.lane!r} exists ({what}); use `extend` or `delete`")
    now = now_ms()
    lane = model.Lane(args.lane, args.owner or default_owner(), now, ttl, now + ttl,
                      args.partitions, retention)
    async with RegistryWriter(bootstrap, lanes.registry_topic) as writer:
        await writer.put(model.lane_key(lane.name), lane)
    print(f"created lane {lane.name} (expires in {_ago(ttl)}); send with "
          f"Client.send(..., lane={lane.name!r})")
    return 0


async def _extend(args, bootstrap, lanes) -> int:
    import dataclasses

    from . import model
    from .registry import RegistryWriter, now_ms

    ttl = args.ttl_ms
    lane = (await _read(bootstrap, lanes)).lanes.get(args.lane)
    now = now_ms()
    if lane is None or not lane.live(now):
        raise ValueError(f"no live lane {args.lane!r} (see `databus lanes list`)")
    lane = dataclasses.replace(lane, ttl_ms=now + ttl - lane.created, expires=now + ttl)
    async with RegistryWriter(bootstrap, lanes.registry_topic) as writer:
        await writer.put(model.lane_key(lane.name), lane)
    print(f"lane {lane.name} now expires in {_ago(ttl)}")
    return 0


async def _delete(args, bootstrap, lanes) -> int:
    from databus.client import Admin

    from .registry import RegistryWriter, delete_lane

    state = await _read(bootstrap, lanes)
    if args.lane not in state.lanes:
        raise ValueError(f"no lane {args.lane!r} (see `databus lanes list`)")
    async with Admin(bootstrap) as admin, \
            RegistryWriter(bootstrap, lanes.registry_topic) as writer:
        topics = await delete_lane(admin, writer, lanes.topic, args.lane, state=state,
                                   merge_bootstrap=bootstrap if args.merge else None)
    merged = " (merged into their main topics first)" if args.merge and topics else ""
    print(f"deleted lane {args.lane} and its topics{merged}: {', '.join(topics) or 'none'}")
    return 0


async def _list(args, bootstrap, lanes) -> int:
    from databus.cli_helpers.options import print_json
    from databus.cli_helpers.table import Column, print_table
    from databus.client import Admin

    from . import model
    from .registry import now_ms

    state = await _read(bootstrap, lanes)
    async with Admin(bootstrap) as admin:
        names = await admin.list_topics()
    now = now_ms()
    rows = []
    for lane in sorted(state.lanes.values(), key=lambda lane: lane.created):
        pattern = model.lane_topic_pattern(lanes.topic, lane.name)
        rows.append({
            "lane": lane.name, "owner": lane.owner, "created": lane.created,
            "expires": lane.expires, "live": lane.live(now),
            "topics": [t for t in names if pattern.fullmatch(t)],
            "consumers": [c.id for c in state.live_consumers(lane.name, now)],
        })
    if args.json:
        print_json(rows)
        return 0
    print_table(
        [Column("LANE"), Column("OWNER"), Column("AGE", "right"), Column("EXPIRES", "right"),
         Column("TOPICS"), Column("LIVE CONSUMERS", "right")],
        [[r["lane"], r["owner"], _ago(now - r["created"]),
          f"in {_ago(r['expires'] - now)}" if r["live"] else "expired",
          r["topics"] or "-", str(len(r["consumers"]))] for r in rows],
    )
    return 0


async def _read(bootstrap, lanes):
    from .registry import read_registry

    return await read_registry(bootstrap, lanes.registry_topic)


def _ago(ms: int) -> str:
    """A short human duration: 45s, 12m, 3h05m, 2d03h."""
    s = max(ms, 0) // 1000
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s" if m < 10 else f"{m}m"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"
