"""``databus mirror``: run mirrors alone, show their status, translate group offsets.

    databus mirror -c mirror.yaml                      # run every mirror of the file
    databus mirror status -c mirror.yaml [--mirror NAME] [--metrics HOST:PORT]
    databus mirror translate-offsets -c mirror.yaml --mirror NAME --group G [--execute]

The file has the schema of sidecar.yaml; one with only ``clusters:`` and ``mirrors:`` is
enough.  ``run`` serves /metrics and /healthz on ``--metrics-listen`` (default: the file's
``sidecar.metrics_listen``) and reloads the file on SIGHUP or when it changes.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

import trio

from databus.config import ConfigError, DatabusConfig, load_config
from databus.startup import StartupError

log = logging.getLogger("databus.mirror")

ACTIONS = ("run", "status", "translate-offsets")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=ACTIONS, default="run",
                        help="run (default), status, or translate-offsets")
    parser.add_argument("-c", "--config", default="sidecar.yaml",
                        help="config file with clusters: and mirrors: (default: sidecar.yaml)")
    parser.add_argument("--mirror", help="mirror name (status: only this one)")
    parser.add_argument("--group", help="translate-offsets: the consumer group")
    parser.add_argument("--execute", action="store_true",
                        help="translate-offsets: commit the translated offsets on the target "
                        "(refused while the group has members there)")
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help="status: read a running mirror's /metrics instead of the clusters")
    parser.add_argument("--metrics-listen", metavar="HOST:PORT",
                        help="run: serve /metrics here ('none': off; default: the file's "
                        "sidecar.metrics_listen)")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"databus mirror: {exc}", file=sys.stderr)
        return 2
    if not config.mirrors:
        print(f"databus mirror: {args.config} configures no mirrors (mirrors:)", file=sys.stderr)
        return 2
    try:
        if args.action == "run":
            return trio.run(_run, config, args)
        if args.action == "status":
            return trio.run(_status, config, args)
        return trio.run(_translate, config, args)
    except (ConfigError, StartupError) as exc:
        print(f"databus mirror: {exc}", file=sys.stderr)
        return 2


# -- run ----------------------------------------------------------------------------------------


class _Reloader:
    """What databus.service.reload.watch_config drives: the file, the config, apply."""

    def __init__(self, path: Path, config: DatabusConfig, supervisor) -> None:
        self.config_path = path
        self.config = config
        self.supervisor = supervisor

    async def reload_from_file(self) -> bool:
        try:
            new = load_config(self.config_path)
        except ConfigError as exc:
            log.error("config rejected, keeping the current one: %s", exc)
            return False
        self.config = new
        self.supervisor.apply(new)
        log.info("config applied (%d mirrors)", len(new.mirrors))
        return True


async def _run(config: DatabusConfig, args) -> int:
    from databus.service.metrics import serve_http
    from databus.service.reload import watch_config
    from databus.service.run import log_metrics_address, open_metrics_listeners, stop_on_signals

    from .supervisor import MirrorSupervisor

    listen = args.metrics_listen if args.metrics_listen is not None else config.sidecar.metrics_listen
    listeners = await open_metrics_listeners(listen, "--metrics-listen")
    supervisor = MirrorSupervisor(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.serve)
        if listeners:
            nursery.start_soon(serve_http, supervisor.metrics, listeners, lambda: (True, "ok"))
            log_metrics_address(log, listeners)
        nursery.start_soon(watch_config, _Reloader(Path(args.config), config, supervisor))
        log.info("running %d mirror(s): %s", len(config.mirrors),
                 ", ".join(f"{m.name} ({m.source} -> {m.target})" for m in config.mirrors))
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            await stop_on_signals(signals, nursery.cancel_scope, log)
    return 0


# -- status -------------------------------------------------------------------------------------

STATUS_COLUMNS = ("MIRROR", "TOPIC", "PARTITION", "SOURCE-END", "MIRRORED", "LAG",
                  "TARGET-TOPIC", "TARGET-OFFSET", "STATE")


def _mirrors(config: DatabusConfig, name: str | None):
    return [config.mirror(name)] if name else list(config.mirrors)


async def _status(config: DatabusConfig, args) -> int:
    from databus.cli_helpers.table import Column, print_table

    if args.metrics:
        rows = await trio.to_thread.run_sync(_rows_from_metrics, args.metrics, args.mirror)
        columns = [*STATUS_COLUMNS, "RECORDS", "ERRORS"]
    else:
        rows = []
        for mirror in _mirrors(config, args.mirror):
            rows.extend(await status_rows(config, mirror))
        columns = list(STATUS_COLUMNS)
    right = {"PARTITION", "SOURCE-END", "MIRRORED", "LAG", "TARGET-OFFSET", "RECORDS", "ERRORS"}
    print_table([Column(c, "right" if c in right else "left") for c in columns], rows)
    return 1 if any(str(row[8]).startswith("STOPPED") for row in rows) else 0


async def status_rows(config: DatabusConfig, mirror) -> list[list]:
    """One row of STATUS_COLUMNS per partition of ``mirror``, read from the clusters (the
    web console shows the same table)."""
    from databus.client import Admin

    from .engine import read_offset_syncs
    from .naming import TopicNaming

    source = config.clusters[mirror.source]
    target = config.clusters[mirror.target]
    naming = TopicNaming.from_config(mirror, source.region)
    with trio.fail_after(60):
        syncs = await read_offset_syncs(target.bootstrap_servers, mirror.offset_syncs_topic,
                                        mirror.name, target.connection_settings(),
                                        stable=True)
        async with Admin(source.bootstrap_servers, source.connection_settings()) as admin:
            topics = naming.select(await admin.list_topics())
            described = await admin.describe_topics(topics) if topics else {}
            tps = [(t, p.partition) for t in topics
                   for p in getattr(described.get(t), "partitions", ())]
            ends = await admin.list_offsets(tps, "latest") if tps else {}
    rows = []
    for tp in sorted(tps):
        sync = syncs.get(tp)
        mirrored = sync.source_offset + 1 if sync else 0
        lag = max(ends.get(tp, 0) - mirrored, 0)
        state = "caught up" if lag == 0 else ("not started" if sync is None else "behind")
        rows.append([mirror.name, tp[0], tp[1], ends.get(tp, "?"),
                     mirrored if sync else "-", lag, naming.target_topic(tp[0]),
                     sync.target_offset if sync and sync.target_offset >= 0 else "-", state])
    return rows


def _rows_from_metrics(address: str, only: str | None) -> list[list]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    url = address if "://" in address else f"http://{address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values: dict[tuple, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("databus_mirror_"):
            continue
        for sample in family.samples:
            labels = sample.labels
            if "partition" not in labels or (only and labels.get("mirror") != only):
                continue
            key = (labels["mirror"], labels["topic"], int(labels["partition"]))
            values.setdefault(key, {})[sample.name] = sample.value
    rows = []
    for (mirror, topic, partition), v in sorted(values.items()):
        lag = int(v["databus_mirror_lag_records"]) if "databus_mirror_lag_records" in v else "-"
        stopped = v.get("databus_mirror_partition_stopped", 0) == 1
        rows.append([mirror, topic, partition, "-", "-", lag, "-", "-",
                     "STOPPED (see the mirror's log)" if stopped else "running",
                     int(v.get("databus_mirror_records_total", 0)),
                     int(v.get("databus_mirror_partition_errors_total", 0))])
    return rows


# -- translate-offsets --------------------------------------------------------------------------


async def _translate(config: DatabusConfig, args) -> int:
    from databus.cli_helpers.table import Column, print_table
    from databus.client import Admin

    from .engine import commit_group_offsets, read_offset_syncs, translate_offsets
    from .naming import TopicNaming

    if not args.mirror or not args.group:
        raise ConfigError("translate-offsets needs --mirror NAME and --group GROUP")
    mirror = config.mirror(args.mirror)
    source = config.clusters[mirror.source]
    target = config.clusters[mirror.target]
    naming = TopicNaming.from_config(mirror, source.region)
    with trio.fail_after(120):
        async with Admin(source.bootstrap_servers, source.connection_settings()) as admin:
            committed = {tp: off for tp, off in
                         (await admin.list_group_offsets(args.group)).items()
                         if naming.matches(tp[0])}
        if not committed:
            print(f"group {args.group} has no committed offsets on {mirror.source} for topics "
                  f"mirrored by {mirror.name}", file=sys.stderr)
            return 1
        syncs = await read_offset_syncs(target.bootstrap_servers, mirror.offset_syncs_topic,
                                        mirror.name, target.connection_settings(),
                                        stable=True)
        translated = await translate_offsets(target.bootstrap_servers, naming, mirror.source,
                                             syncs, committed, target.connection_settings())
    rows = [[args.group, tp[0], tp[1], committed[tp], ttp[0],
             "-" if off is None else off]
            for tp, (ttp, off) in sorted(translated.items())]
    print_table([Column("GROUP"), Column("TOPIC"), Column("PARTITION", "right"),
                 Column("SOURCE-OFFSET", "right"), Column("TARGET-TOPIC"),
                 Column("TARGET-OFFSET", "right")], rows)
    if args.execute:
        async with Admin(target.bootstrap_servers, target.connection_settings()) as admin:
            described = (await admin.describe_groups([args.group])).get(args.group)
        if described is not None and described.members:
            print(f"group {args.group} has {len(described.members)} active member(s) on "
                  f"{mirror.target}: not committing", file=sys.stderr)
            return 1
        offsets = {ttp: off for ttp, off in translated.values() if off is not None}
        await commit_group_offsets(target.bootstrap_servers, args.group, offsets,
                                   target.connection_settings())
        print(f"committed {len(offsets)} offset(s) for group {args.group} on {mirror.target}")
    return 0
