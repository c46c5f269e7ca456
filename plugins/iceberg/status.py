"""What the console's status page shows of an iceberg sink (hook
``databus_console_sink_tables``): each of its tables with the last snapshot, the records it
holds and the Kafka offsets its snapshots hold (the console adds the lag).  Read-only: a
catalog that does not exist yet (an SQLite file not created) shows no table, and none is
created."""

from __future__ import annotations

import datetime
import os
import re

from .options import parse_options
from .tables import load_table, local_path, open_catalog, table_offsets


def sink_tables(sink) -> list[dict]:
    options = parse_options(sink.config, reading=True)
    if options.catalog.get("type", "sql") == "sql":
        local = local_path(options.catalog.get("uri", ""))
        if local is not None and not os.path.exists(local):
            return []  # the sink has not run yet
    catalog = open_catalog(options.catalog)
    if sink.topics:
        names = sorted({options.table_name(t) for t in sink.topics})
    else:  # topics.regex: the namespace's tables
        try:
            names = sorted(".".join(t) for t in catalog.list_tables(options.namespace))
        except Exception:  # no namespace yet: no table
            names = []
        if "{topic}" in options.table and sink.topics_regex:
            pattern = re.compile(sink.topics_regex)
            names = [n for n in names if pattern.fullmatch(n.split(".", 1)[1])
                     or pattern.fullmatch(n.split(".", 1)[1].replace("_", "."))]
    out = []
    for name in names:
        table = load_table(catalog, name)
        if table is None:
            continue
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot is not None and snapshot.summary else None
        out.append({
            "table": name,
            "snapshot": snapshot.snapshot_id if snapshot is not None else None,
            "committed": _when(snapshot.timestamp_ms) if snapshot is not None else None,
            "records": int(summary["total-records"]) if summary is not None
            and "total-records" in summary.additional_properties else 0,
            "offsets": table_offsets(table),
        })
    return out


def _when(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")
