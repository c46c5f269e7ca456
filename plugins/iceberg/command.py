"""``databus iceberg``: the tables of a sidecar.yaml's iceberg sinks — their snapshots with
the offsets each holds, expiring old snapshots, rewriting small files.

::

    databus iceberg show [TABLE] [--snapshots 5]
    databus iceberg expire [TABLE] [--older-than P5D] [--retain-last 10]
    databus iceberg compact [TABLE] [--target-file-size-bytes N]

TABLE is ``namespace.table``; without it, every table in the namespaces of the file's
iceberg sinks.  ``expire`` and ``compact`` commit like any writer: they may run while the
sinks run (a sink's commit that meets theirs is built again on the new snapshot).
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import time

PROG = "databus iceberg"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="each table's recent snapshots and the offsets they hold")
    show.add_argument("--snapshots", type=int, default=5, metavar="N",
                      help="the N newest snapshots (default 5)")
    expire = sub.add_parser("expire", help="drop old snapshots and the files only they used")
    expire.add_argument("--older-than", default="P5D", metavar="DURATION",
                        help="snapshots older than this (ISO-8601 duration, default P5D: "
                        "Iceberg's history.expire.max-snapshot-age-ms)")
    expire.add_argument("--retain-last", type=int, default=10, metavar="N",
                        help="always keep the N newest snapshots (default 10)")
    compact = sub.add_parser("compact", help="rewrite each partition's small data files as "
                             "one (a replace snapshot carrying the offsets)")
    compact.add_argument("--target-file-size-bytes", type=int, default=None, metavar="N",
                         help="files smaller than this are rewritten (default: the table's "
                         "write.target-file-size-bytes)")
    for p in (show, expire, compact):
        p.add_argument("table", nargs="?", metavar="TABLE", help="namespace.table (default: "
                       "every table of the iceberg sinks' namespaces)")
        p.add_argument("-c", "--config", default=None,
                       help="sidecar.yaml with the iceberg sinks (default: ./sidecar.yaml)")


def run(args) -> int:
    from databus.config import ConfigError, load_config

    path = args.config
    if path is None and os.path.exists("sidecar.yaml"):
        path = "sidecar.yaml"
    if path is None:
        print(f"{PROG}: no configuration: pass -c FILE (a sidecar.yaml with iceberg sinks)",
              file=sys.stderr)
        return 2
    try:
        config = load_config(path)
        targets = _tables(config, args.table)
    except (ConfigError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.action == "expire":
        try:
            duration_ms(args.older_than)
        except ValueError as exc:
            print(f"{PROG}: --older-than: {exc}", file=sys.stderr)
            return 2
    if not targets:
        print(f"{PROG}: no iceberg tables yet (sinks with `plugin: iceberg` in {path})")
        return 0
    action = {"show": _show, "expire": _expire, "compact": _compact}[args.action]
    for table in targets:
        action(table, args)
    return 0


def _tables(config, wanted: str | None) -> list:
    """The tables of the file's iceberg sinks (each sink's catalog and namespace)."""
    from .options import parse_options
    from .tables import load_table, open_catalog

    seen, out = set(), []
    for name, sink in config.all_sinks().items():
        if sink.plugin != "iceberg":
            continue
        try:
            options = parse_options(sink.config, reading=True)
        except ValueError as exc:
            raise ValueError(f"sink {name!r}: {exc}") from None
        catalog = open_catalog(options.catalog)
        if wanted is not None:
            names = [wanted] if wanted.split(".", 1)[0] == options.namespace else []
        else:
            try:
                names = [".".join(t) for t in catalog.list_tables(options.namespace)]
            except Exception:  # the namespace does not exist yet: no table
                names = []
        for table_name in names:
            key = (repr(sorted(options.catalog.items())), table_name)
            if key in seen:
                continue
            seen.add(key)
            table = load_table(catalog, table_name)
            if table is not None:
                out.append(table)
    if wanted is not None and not out:
        raise ValueError(f"no table {wanted!r} in the iceberg sinks' catalogs")
    return out


def _when(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _show(table, args) -> None:
    from rich.console import Console
    from rich.table import Table

    from .options import OFFSETS_PROPERTY, decode_offsets
    from .tables import table_offsets

    console = Console()
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)
    current = table.current_snapshot()
    summary = current.summary if current is not None else None
    console.print(f"[bold]{table.name()[0]}.{table.name()[1]}[/bold]  {table.location()}")
    console.print(f"  records {summary.get('total-records', '0') if summary else 0}, "
                  f"data files {summary.get('total-data-files', '0') if summary else 0}, "
                  f"snapshots {len(snapshots)}, partitioned by "
                  f"{_spec(table) or 'nothing'}")
    resume = table_offsets(table)
    console.print("  resumes at: " + (", ".join(f"{t}-{p}:{n}" for (t, p), n in
                                               sorted(resume.items())) or "-"))
    grid = Table(title=f"newest {min(args.snapshots, len(snapshots))} snapshot(s)")
    for column in ("snapshot", "committed", "operation", "added records", "total records",
                   "offsets (" + OFFSETS_PROPERTY + ")"):
        grid.add_column(column, overflow="fold")
    for snapshot in snapshots[:args.snapshots]:
        s = snapshot.summary
        offsets = decode_offsets(s.get(OFFSETS_PROPERTY) if s else None)
        grid.add_row(str(snapshot.snapshot_id), _when(snapshot.timestamp_ms),
                     s.operation.value if s else "?", s.get("added-records", "0") if s else "",
                     s.get("total-records", "") if s else "",
                     " ".join(f"{t}-{p}:{n}" for (t, p), n in sorted(offsets.items())))
    console.print(grid)


def _spec(table) -> str:
    schema = table.schema()
    return ", ".join(f"{f.transform}({schema.find_column_name(f.source_id)})"
                     for f in table.spec().fields)


def reachable_files(table) -> set[str]:
    """Every manifest list, manifest and live data file of the table's snapshots."""
    out = set()
    manifests_seen = set()
    for snapshot in table.snapshots():
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path)
            if manifest.manifest_path in manifests_seen:
                continue
            manifests_seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                out.add(entry.data_file.file_path)
    return out


_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")


def duration_ms(text: str) -> int:
    """An ISO-8601 duration of days and time (P5D, PT12H, P1DT30M, PT0S) in ms."""
    match = _ISO_DURATION.match(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (e.g. P5D, PT12H, PT0S)")
    parts = {k: float(v or 0) for k, v in match.groupdict().items()}
    return int(((parts["d"] * 24 + parts["h"]) * 60 + parts["m"]) * 60_000 + parts["s"] * 1000)


def _expire(table, args) -> None:
    cutoff = time.time() * 1000 - duration_ms(args.older_than)
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)
    current = table.current_snapshot()
    keep = {s.snapshot_id for s in snapshots[:max(args.retain_last, 1)]}
    if current is not None:
        keep.add(current.snapshot_id)
    old = [s.snapshot_id for s in snapshots
           if s.snapshot_id not in keep and s.timestamp_ms < cutoff]
    name = ".".join(table.name())
    if not old:
        print(f"{name}: nothing to expire ({len(snapshots)} snapshot(s))")
        return
    before = reachable_files(table)
    table.maintenance.expire_snapshots().by_ids(old).commit()
    table.refresh()
    gone = before - reachable_files(table)
    for path in gone:
        table.io.delete(path)
    print(f"{name}: expired {len(old)} snapshot(s), deleted {len(gone)} file(s) only they "
          f"used; {len(table.snapshots())} left")


def _compact(table, args) -> None:
    import uuid

    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    from .options import OFFSETS_PROPERTY, encode_offsets
    from .tables import table_offsets

    name = ".".join(table.name())
    target = args.target_file_size_bytes or int(table.properties.get(
        "write.target-file-size-bytes", 512 * 1024 * 1024))
    groups: dict = {}
    for task in table.scan().plan_files():
        if task.file.file_size_in_bytes < target and not task.delete_files:
            groups.setdefault((task.file.spec_id, str(task.file.partition)), []).append(task)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if not groups:
        print(f"{name}: nothing to compact")
        return
    tx = table.transaction()
    # The replace snapshot carries the offsets forward (a sink resumes from the snapshots).
    properties = {OFFSETS_PROPERTY: encode_offsets(table_offsets(table))}
    removed = added = 0
    with tx.update_snapshot(snapshot_properties=properties).overwrite() as rewrite:
        for tasks in groups.values():
            rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()) \
                .to_table(tasks)
            rows = rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
            for data_file in _dataframe_to_data_files(tx.table_metadata, rows, table.io,
                                                      write_uuid=uuid.uuid4()):
                rewrite.append_data_file(data_file)
                added += 1
            for task in tasks:
                rewrite.delete_data_file(task.file)
                removed += 1
    tx.commit_transaction()
    print(f"{name}: rewrote {removed} small file(s) as {added} ({len(groups)} partition(s)); "
          "the old files go when `expire` drops the snapshots that use them")
