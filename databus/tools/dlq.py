"""``databus dlq``: read and replay a consumer group's dead-letter topic.

Messages that subscribers of a stream nacked (or did not ack in time) ``max.attempts``
times land in the group's dead-letter topic with headers saying where they came from and
why (docs/consuming.md).  That topic is the one the group's ``errors.deadletterqueue.
topic.name`` names (a share group's, KIP-1191: the sidecar's queue mode sets ``dlq.GROUP``
where the cluster has them, and the broker writes the letters), else the sidecar's own
``GROUP.dlq``; ``--topic`` picks one.  Both kinds of letter are read: the sidecar's
``databus-*`` headers, and the broker's ``__dlq.errors.*`` ones.  This tool talks to the
cluster over the Kafka protocol, like the other console tools (``--bootstrap-server
HOST:PORT``):

    databus dlq list GROUP [--json]
        one line per dead letter: partition, offset, origin topic-partition@offset,
        attempts, reason, time
    databus dlq show GROUP [--partition P --offset O] [--max-messages N]
        the dead letters whole: headers and value
    databus dlq replay GROUP [--partition P --offset O] [--dry-run]
        deliver them to GROUP again: each is written to the group's retry topic as attempt
        1, due now, so only GROUP's subscribers receive it (other groups of the stream are
        not disturbed).  Without --partition/--offset every dead letter not replayed before
        is replayed, and the consumer group ``GROUP.dlq-replay`` remembers how far.

Exit status: 0 done, 1 the cluster refused or is unreachable, 2 bad usage.
"""

from __future__ import annotations

import datetime
import sys
import time

import trio

from databus.cli_helpers.options import add_bootstrap, add_json, print_json
from databus.cli_helpers.table import Column, print_table
from databus.client import Admin, Consumer, KafkaError, Producer
from databus.protocol import share_dlq
from databus.sidecar.consume.core import (
    H_ATTEMPT,
    H_DUE,
    H_OFFSET,
    H_PARTITION,
    H_REASON,
    H_TOPIC,
    header,
)
from databus.sidecar.consume.service import dlq_topic, group_configs, retry_topic

ACTIONS = ("list", "show", "replay")
REPLAY_REASON = "replayed from the dead-letter topic"


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="list, show or replay")
    parser.add_argument("group", metavar="GROUP", help="the consumer group (subscribe's group)")
    add_bootstrap(parser)
    parser.add_argument("--topic", help="the dead-letter topic to read (default: the "
                        "group's errors.deadletterqueue.topic.name, else GROUP.dlq)")
    parser.add_argument("--partition", type=int, help="only this partition of the topic")
    parser.add_argument("--offset", type=int, help="only this offset (with --partition)")
    parser.add_argument("--max-messages", type=int, default=None,
                        help="show at most this many")
    parser.add_argument("--dry-run", action="store_true",
                        help="replay: print what would be replayed, write nothing")
    add_json(parser)


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode(errors="replace")


# (the sidecar's header, the broker's KIP-1191 header) saying the same thing
_ORIGIN_TOPIC = (H_TOPIC, share_dlq.HEADER_TOPIC)
_ORIGIN_PARTITION = (H_PARTITION, share_dlq.HEADER_PARTITION)
_ORIGIN_OFFSET = (H_OFFSET, share_dlq.HEADER_OFFSET)
_ATTEMPTS = (H_ATTEMPT, share_dlq.HEADER_DELIVERY_COUNT)
_REASON = (H_REASON, share_dlq.HEADER_MESSAGE)


def _either(headers, names: tuple[str, str]) -> bytes | None:
    """A letter's header: the sidecar's name, else the broker's (a letter the broker wrote
    carries only KIP-1191's; one the sidecar wrote to a share group's DLQ carries both)."""
    value = header(headers, names[0])
    return value if value is not None else header(headers, names[1])


def _row(record) -> dict:
    headers = record.headers
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "origin": f"{_text(_either(headers, _ORIGIN_TOPIC))}-"
                  f"{_text(_either(headers, _ORIGIN_PARTITION))}"
                  f"@{_text(_either(headers, _ORIGIN_OFFSET))}",
        "attempts": int(_either(headers, _ATTEMPTS) or 0),
        "reason": _text(_either(headers, _REASON)),
        "timestamp": record.timestamp,
    }


def _replay_headers(headers, now: bytes) -> list[tuple[str, bytes]]:
    """A letter's headers as a retry of attempt 1 due ``now``: the app's own and its origin
    in the sidecar's names (what the sidecar's retry reader needs), KIP-1191's dropped."""
    origin = [(names[0], _either(headers, names) or b"")
              for names in (_ORIGIN_TOPIC, _ORIGIN_PARTITION, _ORIGIN_OFFSET)]
    dropped = {H_ATTEMPT, H_DUE, H_REASON, H_TOPIC, H_PARTITION, H_OFFSET}
    own = [(k, v) for k, v in headers
           if k not in dropped and not k.startswith("__dlq.errors.")]
    return own + origin + [(H_ATTEMPT, b"1"), (H_DUE, now),
                           (H_REASON, REPLAY_REASON.encode())]


async def _read(bootstrap: str, topic: str, partition: int | None, offset: int | None,
                start_group: str | None = None):
    """The records of ``topic`` up to its current end (one, with partition and offset).
    ``start_group``: start each partition at that group's committed offset."""
    config = {"auto.offset.reset": "earliest", "enable.auto.commit": False}
    if start_group:
        config["group.id"] = start_group
    async with Consumer(bootstrap, config) as consumer:
        partitions = await consumer.partitions_for(topic)
        tps = [(topic, p) for p in partitions if partition is None or p == partition]
        if not tps:
            raise SystemExit(f"databus dlq: {topic} has no partition {partition}")
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        if offset is not None:
            consumer.seek(tps[0], offset)
            ends = {tps[0]: min(ends[tps[0]], offset + 1)}
        elif start_group:
            for tp in tps:
                committed = await consumer.committed(tp)
                if committed is not None:
                    consumer.seek(tp, committed)
        out = []
        left = {tp for tp in tps if ends[tp] > 0}
        positions = {tp: await consumer.position(tp) for tp in left}
        left = {tp for tp in left if positions[tp] < ends[tp]}
        while left:
            for record in await consumer.poll(1.0):
                tp = (record.topic, record.partition)
                if tp in left and record.offset < ends[tp]:
                    out.append(record)
                    if record.offset + 1 >= ends[tp]:
                        left.discard(tp)
        return out, ends


class UnknownGroup(Exception):
    """Neither the group nor its dead-letter topic exists on the cluster."""


async def _dead_letter_topic(bootstrap: str, group: str, topic: str | None) -> str | None:
    """The group's dead-letter topic (``topic`` if given, else the one its
    errors.deadletterqueue.topic.name names, else GROUP.dlq) if it exists, asked without
    creating it (a Consumer's metadata request would auto-create it on a broker that allows
    that).  A group the cluster does not know, without a dead-letter topic, is
    UnknownGroup; a known one without it has none yet (None)."""
    async with Admin(bootstrap) as admin:
        if topic is None:
            try:
                named = await group_configs(admin, group, [share_dlq.DLQ_TOPIC_CONFIG])
            except KafkaError:  # a cluster without group configs (before KIP-932)
                named = {}
            topic = named.get(share_dlq.DLQ_TOPIC_CONFIG) or dlq_topic(group)
        if topic in await admin.list_topics():
            return topic
        if group not in {name for name, _ in await admin.list_groups()}:
            raise UnknownGroup(group)
    return None


async def _list(args) -> list:
    topic = await _dead_letter_topic(args.bootstrap, args.group, args.topic)
    if topic is None:
        return []
    records, _ = await _read(args.bootstrap, topic, args.partition, args.offset)
    return records[: args.max_messages] if args.max_messages else records


async def _replay(args) -> int:
    group = args.group
    single = args.offset is not None
    tracker = None if single else f"{group}.dlq-replay"
    config = {"auto.offset.reset": "earliest", "enable.auto.commit": False}
    if tracker:
        config["group.id"] = tracker
    topic = await _dead_letter_topic(args.bootstrap, group, args.topic)
    if topic is None:
        return 0
    records, ends = await _read(args.bootstrap, topic, args.partition, args.offset, tracker)
    if args.dry_run:
        for record in records:
            print(f"would replay {_row(record)['origin']} (partition {record.partition} "
                  f"offset {record.offset})")
        return len(records)
    now = str(int(time.time() * 1000)).encode()
    async with Producer(args.bootstrap, {"acks": "all", "client.id": "databus-dlq"}) as producer:
        futures = []
        for record in records:
            headers = _replay_headers(record.headers, now)
            futures.append(await producer.send(
                retry_topic(group), record.value, record.key, headers,
                timestamp_ms=record.timestamp if record.timestamp >= 0 else None,
            ))
        for future in futures:
            await future.wait()
    if tracker and records:
        async with Consumer(args.bootstrap, config) as committer:
            await committer.commit(ends)
    return len(records)


def run(args) -> int:
    if args.offset is not None and args.partition is None:
        print("databus dlq: --offset needs --partition", file=sys.stderr)
        return 2
    try:
        if args.action == "replay":
            count = trio.run(_replay, args)
            if not args.dry_run:
                print(f"replayed {count} message(s) of {args.group}'s dead-letter topic to "
                      f"{retry_topic(args.group)}")
            return 0
        records = trio.run(_list, args)
    except KafkaError as exc:
        print(f"databus dlq: {exc}", file=sys.stderr)
        return 1
    except UnknownGroup:
        print(f"databus dlq: unknown group {args.group!r} (no such consumer group and no "
              f"topic {dlq_topic(args.group)})", file=sys.stderr)
        return 1
    rows = [_row(r) for r in records]
    if args.json:
        if args.action == "show":
            for row, record in zip(rows, records):
                row["key"] = _text(record.key)
                row["value"] = _text(record.value)
                row["headers"] = {k: _text(v) for k, v in record.headers}
        print_json(rows)
        return 0
    if args.action == "list":
        print_table(
            [Column("PARTITION", "right"), Column("OFFSET", "right"), "ORIGIN",
             Column("ATTEMPTS", "right"), "REASON", "TIME"],
            [[r["partition"], r["offset"], r["origin"], r["attempts"], r["reason"],
              _when(r["timestamp"])] for r in rows],
        )
        return 0
    for row, record in zip(rows, records):
        print(f"partition {row['partition']} offset {row['offset']}  origin {row['origin']}  "
              f"attempts {row['attempts']}  time {_when(row['timestamp'])}")
        print(f"  reason: {row['reason']}")
        for name, value in record.headers:
            print(f"  header {name}: {_text(value)}")
        if record.key is not None:
            print(f"  key: {_text(record.key)}")
        print(f"  value: {_text(record.value)}")
    return 0


def _when(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
