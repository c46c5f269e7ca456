"""``databus bench telemetry``: the broker's CPU for clients pushing their metrics (KIP-714).

Starts a broker (with ``--metrics-listen``) and ``--clients`` librdkafka producers at their
default settings, all subscribed (``metrics=*``, ``interval.ms=--interval-ms``).  Once every
client has pushed, the broker's CPU is measured over ``--seconds`` (pushes decoded and turned
into series, scrapes of /metrics every ``--scrape-seconds``); then the subscription is
deleted, the clients learn it at their next push (UNKNOWN_SUBSCRIPTION_ID, then an empty
subscription), and the same clients, connected and idle, are measured again: the difference
is what the telemetry costs.  Figures: CPU as a percent of one core.
"""

from __future__ import annotations

import re
import tempfile
import time
import urllib.request


def add_arguments(parser) -> None:
    parser.add_argument("--clients", type=int, default=100, help="librdkafka producers")
    parser.add_argument("--interval-ms", type=int, default=5000, help="push interval")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured per phase")
    parser.add_argument("--scrape-seconds", type=float, default=15.0,
                        help="scrape /metrics this often while measuring (Prometheus' "
                             "common 15 s)")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def _pushes(text: str) -> int:
    found = re.search(r'databus_broker_client_metrics_pushes_total\{result="none"\} (\d+)', text)
    return int(found.group(1)) if found else 0


def _clients(text: str) -> int:
    found = re.search(r"^databus_broker_client_metrics_clients (\d+)", text, re.M)
    return int(found.group(1)) if found else 0


def run(args) -> int:
    import confluent_kafka

    from databus.broker.process import BrokerProcess
    from databus.cli_helpers.table import Column, print_table

    from .common import ProcessCpu, with_admin

    rows = []
    with tempfile.TemporaryDirectory(prefix="databus-bench-") as root, \
            BrokerProcess(root, args=("--metrics-listen", "127.0.0.1:0")) as broker:
        port = int(re.search(r"metrics on http://127.0.0.1:(\d+)/metrics",
                             broker.log_text()).group(1))
        cpu = ProcessCpu(broker.pid)

        async def subscribe(admin, ops):
            await admin.alter_config_resource(16, "bench", ops)

        with_admin(broker.bootstrap, lambda admin: subscribe(
            admin, [("metrics", 0, "*"), ("interval.ms", 0, str(args.interval_ms))]))
        producers = [confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
                     for _ in range(args.clients)]
        try:
            deadline = time.monotonic() + 4 * args.interval_ms / 1000 + 30
            while _clients(_scrape(port)) < args.clients:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {_clients(_scrape(port))} of {args.clients} "
                                       "clients pushed")
                time.sleep(0.5)
            rows.append(_measure("subscribed (metrics=*)", args, port, cpu))
            with_admin(broker.bootstrap, lambda admin: subscribe(
                admin, [("metrics", 1, None), ("interval.ms", 1, None)]))
            time.sleep(2 * args.interval_ms / 1000 + 1)  # every client has learnt it
            rows.append(_measure("not subscribed (idle clients)", args, port, cpu))
        finally:
            for producer in producers:
                producer.close()
    print_table(
        [Column("phase"), *(Column(h, justify="right") for h in (
            "broker CPU % of a core", "pushes/s", "series exported"))],
        rows,
        title=f"databus bench telemetry: {args.clients} librdkafka producers (defaults), "
              f"push interval {args.interval_ms} ms, {args.seconds:g} s per phase",
    )
    return 0


def _measure(label: str, args, port: int, cpu) -> tuple[str, str, str, str]:
    text = _scrape(port)
    pushes, start_cpu, start = _pushes(text), cpu.seconds(), time.monotonic()
    series = 0
    while time.monotonic() - start < args.seconds:
        time.sleep(min(args.scrape_seconds, max(0.0, args.seconds - (time.monotonic() - start))))
        text = _scrape(port)
        series = max(series, sum(1 for line in text.splitlines()
                                 if 'client_instance_id="' in line))
    elapsed = time.monotonic() - start
    used = cpu.seconds() - start_cpu
    return (label, f"{100 * used / elapsed:.2f}", f"{(_pushes(text) - pushes) / elapsed:.1f}",
            str(series))
