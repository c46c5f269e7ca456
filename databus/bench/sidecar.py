"""``databus bench sidecar``: the SDK through the sidecar to the broker, beside librdkafka.

Two measurements per path, 100-byte values by default:

* throughput: send ``--messages`` as fast as the path takes them, records/s until every
  delivery report is back;
* latency: send at a fixed ``--rate`` for ``--seconds``, p50/p99 from send() to the delivery
  report (linger.ms ``--linger-ms``).

Paths: ``sdk -> sidecar -> broker`` (the SDK in this process, the sidecar in a child process
``databus sidecar``, the broker in another: three processes on this machine's cores), and
``confluent-kafka -> broker`` (librdkafka straight to the same broker, same settings) as the
reference.  Starts its own broker unless ``--bootstrap`` is given.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--messages", type=int, default=300_000, help="throughput run size")
    parser.add_argument("--size", type=int, default=100, help="value bytes per message")
    parser.add_argument(
        "--rates", default="20000,50000",
        help="latency runs: messages/s, comma-separated (one run per rate)",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each latency run")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--only", choices=["sidecar", "librdkafka"], help="run one path only"
    )


@contextlib.contextmanager
def sidecar_process(root: str, bootstrap: str, args):
    """A ``databus sidecar`` child process; yields its socket path."""
    import yaml

    socket_path = os.path.join(root, "bench.sock")
    config = os.path.join(root, "sidecar.yaml")
    with open(config, "w") as f:
        yaml.safe_dump({
            "sidecar": {"socket": socket_path, "metrics_listen": None, "reload_poll_ms": 0},
            "clusters": {"bench": {"bootstrap.servers": bootstrap}},
            "producer": {"acks": args.acks, "linger.ms": args.linger_ms,
                         "batch.size": 262144},
            "default_route": {"topic": "{stream}"},
        }, f)
    log = open(os.path.join(root, "sidecar.log"), "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "sidecar", "-c", config],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(socket_path):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(open(os.path.join(root, "sidecar.log")).read())
            time.sleep(0.05)
        yield socket_path
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


class LatencyRecorder:
    def __init__(self, expected: int) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.done = threading.Event()
        self.expected = expected
        self._count = 0
        self._lock = threading.Lock()

    def record(self, sent_at: float, failed: bool) -> None:
        now = time.perf_counter()
        with self._lock:
            self.latencies.append(now - sent_at)
            self.errors += failed
            self._count += 1
            if self._count >= self.expected:
                self.done.set()


def paced(rate: int, seconds: float):
    """Yield (index, batch size) so that ``rate`` messages/s go out in ~1 ms batches."""
    total = int(rate * seconds)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        if due > sent:
            yield sent, due - sent
            sent = due
        else:
            time.sleep(0.0005)


def run_sdk(socket_path: str, args, topic: str) -> dict:
    from databus import Client

    value = b"x" * args.size
    with Client(socket_path) as client:
        client.send(topic, b"warm-up").result(30)  # topic created, metadata cached
        start = time.perf_counter()
        futures = [client.send(topic, value) for _ in range(args.messages)]
        client.flush(300)
        elapsed = time.perf_counter() - start
        failed = sum(f.exception(0) is not None for f in futures)
        futures = None

        recorders = {}
        for rate in args.rate_list:
            recorder = recorders[rate] = LatencyRecorder(int(rate * args.seconds))
            for _, n in paced(rate, args.seconds):
                for _ in range(n):
                    sent_at = time.perf_counter()
                    client.send(topic, value).add_done_callback(
                        lambda f, t=sent_at, r=recorder: r.record(t, f.exception(0) is not None)
                    )
            recorder.done.wait(120)
    return {"elapsed": elapsed, "failed": failed, "recorders": recorders}


def run_librdkafka(bootstrap: str, args, topic: str) -> dict:
    import confluent_kafka

    value = b"x" * args.size
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": args.linger_ms,
        "batch.size": 262144, "queue.buffering.max.messages": 2_000_000,
        "enable.idempotence": args.acks == "all",
    })
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    failed = [0]

    def on_delivery(err, msg):
        if err is not None:
            failed[0] += 1

    start = time.perf_counter()
    for i in range(args.messages):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start

    recorders = {}
    for rate in args.rate_list:
        recorder = recorders[rate] = LatencyRecorder(int(rate * args.seconds))
        for _, n in paced(rate, args.seconds):
            for _ in range(n):
                sent_at = time.perf_counter()
                producer.produce(
                    topic, value,
                    on_delivery=lambda err, msg, t=sent_at, r=recorder: r.record(
                        t, err is not None
                    ),
                )
            producer.poll(0)
        deadline = time.monotonic() + 120
        while not recorder.done.is_set() and time.monotonic() < deadline:
            producer.poll(0.01)
    return {"elapsed": elapsed, "failed": failed[0], "recorders": recorders}


def plugin_call_costs(repeat: int = 200_000) -> list[tuple[str, float]]:
    """Per-message cost of a partitioner called as the sidecar does (the plain callable the
    factory returned) against a pluggy hook dispatch (what a per-message hook would cost)."""
    import timeit

    from databus.plugins import get_plugin_manager, make_partitioner

    pm = get_plugin_manager()
    _, murmur = make_partitioner(pm, "default", {})
    _, round_robin = make_partitioner(pm, "round_robin", {})
    hook = pm.hook.databus_partitioner_names
    key = b"customer-42"

    def best(fn) -> float:
        return min(timeit.repeat(fn, number=repeat, repeat=3)) / repeat

    return [
        ("round_robin partitioner, plain callable", best(lambda: round_robin("t", key, None, 12))),
        ("default (murmur2) partitioner, plain callable", best(lambda: murmur("t", key, None, 12))),
        ("one pluggy hook dispatch (hooks doing almost nothing)", best(hook)),
    ]


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    args.rate_list = [int(r) for r in str(args.rates).split(",") if r.strip()]
    results = []
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(tempfile.TemporaryDirectory(prefix="databus-bench-sidecar-"))
        bootstrap = args.bootstrap
        if not bootstrap:
            from databus.broker.process import BrokerProcess

            broker = stack.enter_context(
                BrokerProcess(root, {"num.partitions": args.partitions})
            )
            bootstrap = broker.bootstrap
        run_id = int(time.time())
        if args.only in (None, "sidecar"):
            socket_path = stack.enter_context(sidecar_process(root, bootstrap, args))
            console.print("running: SDK -> sidecar -> broker ...")
            results.append(("SDK → sidecar → broker",
                            run_sdk(socket_path, args, f"bench-sidecar-{run_id}")))
        if args.only in (None, "librdkafka"):
            console.print("running: confluent-kafka -> broker ...")
            results.append(("confluent-kafka → broker",
                            run_librdkafka(bootstrap, args, f"bench-rdkafka-{run_id}")))

    table = Table(title=(
        f"sidecar benchmark: {args.size}-byte values, acks={args.acks}, "
        f"linger.ms={args.linger_ms}, {args.partitions} partitions"
    ))
    table.add_column("path")
    table.add_column("throughput rec/s", justify="right")
    table.add_column("MB/s", justify="right")
    for rate in args.rate_list:
        table.add_column(f"p50 @ {rate:,}/s", justify="right")
        table.add_column(f"p99 @ {rate:,}/s", justify="right")
    table.add_column("errors", justify="right")
    for name, r in results:
        rate = args.messages / r["elapsed"]
        cells = [name, f"{rate:,.0f}", f"{rate * args.size / 1e6:.1f}"]
        errors = r["failed"]
        for recorder in r["recorders"].values():
            lat = recorder.latencies
            cells += [f"{_quantile(lat, q) * 1000:.2f} ms" for q in (0.5, 0.99)]
            errors += recorder.errors
        table.add_row(*cells, str(errors))
    console.print(table)

    costs = Table(title="hot path: why hooks are factories (per call)")
    costs.add_column("call")
    costs.add_column("µs", justify="right")
    for name, seconds in plugin_call_costs():
        costs.add_row(name, f"{seconds * 1e6:.2f}")
    console.print(costs)
    return 0
