"""``databus index``: query an index (the messages themselves, newest first) and show the
state of every index of a sidecar.yaml.

::

    databus index query orders user_id=42 --since 2026-01-01T00:00 --limit 20 --json
    databus index status
    databus index rebuild orders
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time

PROG = "databus index"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    query = sub.add_parser("query", help="the messages of INDEX whose FIELD is VALUE")
    query.add_argument("index", metavar="INDEX")
    query.add_argument("match", metavar="FIELD=VALUE")
    query.add_argument("--since", metavar="T", help="from T on (epoch ms, ISO-8601 date-time, "
                       "or a duration such as PT1H meaning that long ago)")
    query.add_argument("--until", metavar="T", help="before T (as --since)")
    query.add_argument("--limit", type=int, default=100, help="at most N messages (default 100)")
    query.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    status = sub.add_parser("status", help="entries, size, skipped fields and lag per index")
    rebuild = sub.add_parser("rebuild", help="empty INDEX: its builder indexes its topics "
                             "again from the beginning")
    rebuild.add_argument("index", metavar="INDEX")
    for p in (query, status, rebuild):
        p.add_argument("-c", "--config", default=None,
                       help="sidecar.yaml declaring the indexes (default: ./sidecar.yaml)")
        p.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", default=None,
                       help="HOST:PORT of the cluster when the file names no clusters")


def parse_time(text: str | None, now_ms: int) -> int | None:
    """Epoch milliseconds, an ISO-8601 date-time, or an ISO-8601 duration back from now."""
    if text is None:
        return None
    from databus.cli_helpers.times import parse_datetime, parse_duration

    if text.strip().isdigit():
        return int(text)
    if text.strip().upper().startswith("P"):
        try:
            return now_ms - parse_duration(text)
        except ValueError:
            pass
    try:
        return parse_datetime(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a time (epoch ms, ISO-8601 date-time such as "
                         "2026-01-01T12:00, or a duration such as PT1H)") from None


def run(args) -> int:
    from databus.client import KafkaError
    from databus.config import ConfigError, find_config, load_config

    path = find_config(args.config)
    if path is None:
        print(f"{PROG}: no configuration: pass -c FILE (a sidecar.yaml with `indexes:`)",
              file=sys.stderr)
        return 2
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"{PROG}: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "query":
            return _query(args, config)
        if args.action == "rebuild":
            return _rebuild(args, config)
        return _status(args, config)
    except (ValueError, FileNotFoundError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"{PROG}: the cluster: {exc}", file=sys.stderr)
        return 1


def _query(args, config) -> int:
    import trio

    from .query import bootstrap_for, fetch, lookup, security_for

    field, sep, value = args.match.partition("=")
    if not sep or not field:
        raise ValueError(f"{args.match!r}: write FIELD=VALUE")
    now = int(time.time() * 1000)
    since, until = parse_time(args.since, now), parse_time(args.until, now)
    locations = lookup(config, args.index, field, value, since=since, until=until,
                       limit=args.limit)
    bootstrap = bootstrap_for(config, args.index, args.bootstrap)
    records = trio.run(fetch, bootstrap, locations,
                       security_for(config, args.index, args.bootstrap))
    rows = [record_json(r) for r in records if r is not None]
    gone = len(records) - len(rows)
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        _table(rows, f"{args.index}: {field}={value}")
    if gone:
        print(f"{PROG}: {gone} indexed message(s) no longer in the cluster (retention)",
              file=sys.stderr)
    return 0


def _text(data: bytes | None):
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def record_json(record) -> dict:
    """A message as one JSON object (bytes as UTF-8 text, else ``base64:...``)."""
    return {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _text(record.key), "value": _text(record.value),
        "headers": {k: _text(v) for k, v in record.headers},
    }


def _table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{title} ({len(rows)} messages, newest first)")
    for column in ("timestamp", "topic", "partition", "offset", "key", "value"):
        table.add_column(column, overflow="fold")
    for row in rows:
        moment = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["timestamp"] / 1000))
        table.add_row(f"{moment}.{row['timestamp'] % 1000:03d}Z", row["topic"],
                      str(row["partition"]), str(row["offset"]), row["key"] or "",
                      row["value"] or "")
    Console().print(table)


def _rebuild(args, config) -> int:
    from .query import find_index
    from .store import IndexStore

    path = find_index(config, args.index).db_path(args.index)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no index database at {path} (not built yet?)")
    store = IndexStore(path)
    try:
        store.rebuild()
    finally:
        store.close()
    print(f"index {args.index!r} emptied; its builder indexes from the beginning again")
    return 0


STATUS_COLUMNS = ("index", "entries", "size", "partitions", "lag", "skipped")


def _status(args, config) -> int:
    from rich.console import Console
    from rich.table import Table

    if not config.indexes:
        print(f"{PROG}: no indexes declared (`indexes:` in {args.config or 'sidecar.yaml'})")
        return 0
    table = Table(title="indexes")
    for column in STATUS_COLUMNS:
        table.add_column(column)
    import trio

    for row in trio.run(status_rows, config, args.bootstrap):
        table.add_row(*row)
    Console().print(table)
    return 0


async def status_rows(config, bootstrap: str | None) -> list[list[str]]:
    """One row of STATUS_COLUMNS per index: the local database's figures, and the lag
    against the cluster's end offsets (``?`` and the reason when the cluster is down).
    The web console shows the same table."""
    from .query import bootstrap_for, security_for
    from .store import IndexStore

    rows = []
    for name, index in config.indexes.items():
        try:
            store = IndexStore(index.db_path(name), readonly=True)
        except FileNotFoundError:
            rows.append([name, "-", "-", "-", "not built yet", "-"])
            continue
        try:
            offsets, entries = store.offsets(), store.entry_count()
            size, skipped = store.size_bytes(), store.skipped()
        finally:
            store.close()
        try:
            ends = await _end_offsets(bootstrap_for(config, name, bootstrap), list(offsets),
                                      security_for(config, name, bootstrap))
            lag = str(sum(max(0, ends[tp] - n) for tp, n in offsets.items() if tp in ends))
        except Exception as exc:  # the cluster is down: the local figures still help
            lag = f"? ({exc})"
        rows.append([name, str(entries), f"{size / 1e6:.1f} MB", str(len(offsets)), lag,
                     ", ".join(f"{f} {r}: {c}" for (f, r), c in sorted(skipped.items()))
                     or "0"])
    return rows


def index_topics(config, name: str) -> set[str]:
    """The topics index ``name``'s status row is about: its configured ones and those its
    database holds (a ``topics.regex`` index's matches), for the console to show the row
    only to users who may describe them all."""
    from .store import IndexStore

    index = config.indexes[name]
    topics = set(index.topics)
    try:
        store = IndexStore(index.db_path(name), readonly=True)
    except FileNotFoundError:
        return topics
    try:
        return topics | {topic for topic, _partition in store.offsets()}
    finally:
        store.close()


async def _end_offsets(bootstrap: str, partitions, settings: dict):
    from databus.client import Consumer

    if not partitions:
        return {}
    async with Consumer(bootstrap, {"client.id": "databus-index-status",
                                    **settings}) as consumer:
        return await consumer.end_offsets(partitions)
