"""``databus bench sidecar``: the SDK through the sidecar to the broker, beside librdkafka.

Two measurements per path, 100-byte values by default:

* throughput: send ``--messages`` as fast as the path takes them, records/s until every
  delivery report is back;
* latency: send at a fixed ``--rate`` for ``--seconds``, p50/p99 from send() to the delivery
  report (linger.ms ``--linger-ms``), each path's app in a light process of its own
  (latency.py); ``--breakdown`` adds where the time went (the broker and the sidecar stamp
  each batch: databus/service/latency_trace.py).

Paths: ``sdk -> sidecar -> broker`` (the SDK in this process, the sidecar in a child process
``databus sidecar``, the broker in another: three processes on this machine's cores);
``frames -> sidecar -> broker`` (pre-encoded produce frames written to the sidecar's socket
and reports counted, no SDK: the sidecar's own ceiling); and ``confluent-kafka -> broker``
(librdkafka straight to the same broker, same settings) as the reference.  For each, the CPU
time per message of the app, the sidecar and the broker during the throughput run says who
the limit is.  Starts its own broker unless ``--bootstrap`` is given.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time

from .common import ProcessCpu, add_bootstrap_option


def add_arguments(parser) -> None:
    add_bootstrap_option(parser)
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
        "--keys", type=int, default=0,
        help="messages cycle through this many distinct keys (0: no keys, sticky partitioning)",
    )
    parser.add_argument(
        "--only", choices=["sidecar", "frames", "librdkafka"],
        help="run one path only (and leave out the table of hook costs)"
    )
    parser.add_argument(
        "--breakdown", action="store_true",
        help="after the table, where each latency run's messages spent their time: the broker "
             "and the sidecar stamp every batch (DATABUS_LATENCY_TRACE), lined up per message",
    )


@contextlib.contextmanager
def sidecar_process(root: str, bootstrap: str, args, **sections):
    """A ``databus sidecar`` child process; yields (its socket path, its pid).
    ``sections``: more of sidecar.yaml (``streams=...``, ``consumer=...``)."""
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
            **sections,
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
        yield socket_path, process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def keys_for(args) -> list[bytes | None]:
    from .latency import keys_for as latency_keys_for  # (the latency app's light module)

    return latency_keys_for(args.keys)


def latency_spec(args, topic: str) -> dict:
    return {"topic": topic, "size": args.size, "keys": args.keys, "rates": args.rate_list,
            "seconds": args.seconds}


def run_sdk(socket_path: str, args, topic: str, cpu) -> dict:
    from databus import Client

    value = b"x" * args.size
    keys = keys_for(args)
    nkeys = len(keys)
    with Client(socket_path) as client:
        client.send(topic, b"warm-up").result(30)  # topic created, metadata cached
        # As the librdkafka path below: send without keeping each future (Kafka apps count
        # failures in a delivery callback; the SDK counts them in statistics()).
        send = client.send
        failed_before = client.statistics().failed
        before = cpu()
        start = time.perf_counter()
        for i in range(args.messages):
            send(topic, value, keys[i % nkeys])
        client.flush(300)
        elapsed = time.perf_counter() - start
        used = cpu_delta(before, cpu())
        failed = client.statistics().failed - failed_before

    from .latency import run_in_child

    recorders = run_in_child("sdk", {"socket": socket_path, **latency_spec(args, topic)})
    return {"elapsed": elapsed, "failed": failed, "recorders": recorders, "cpu": used,
            "topic": topic, "through_sidecar": True}


def run_frames(socket_path: str, args, topic: str, cpu) -> dict:
    """The sidecar's ceiling: produce frames of 2048 messages encoded before the clock starts
    are written to its socket as fast as it reads them, and the reports only counted."""
    import socket

    from databus.protocol import sidecar_wire as wire

    value = b"x" * args.size
    keys = keys_for(args)
    per_frame = 2048
    frames = []
    for first in range(0, args.messages, per_frame):
        frames.append(wire.encode_frame(wire.produce([
            wire.message_array(i, topic, value, keys[i % len(keys)])
            for i in range(first, min(args.messages, first + per_frame))
        ])))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    decoder = wire.FrameDecoder()
    outcome = {"failed": 0}

    def read_until_flushed(flush_id: int) -> None:
        while True:
            data = sock.recv(1 << 20)
            if not data:
                raise RuntimeError("the sidecar closed the connection")
            for frame in decoder.feed(data):
                if frame["type"] == "flushed" and frame["id"] == flush_id:
                    return
                if frame["type"] == "reports":
                    for item in frame["reports"]:
                        if item[1] != 0:
                            outcome["failed"] += len(item[0]) if type(item[0]) is list else 1
                elif frame["type"] == "error":
                    raise RuntimeError(f"sidecar error: {frame}")

    try:
        sock.sendall(wire.encode_frame(wire.hello("databus-bench-frames")))
        sock.sendall(wire.encode_frame(wire.produce([[0, topic, b"warm-up"]])))
        sock.sendall(wire.encode_frame(wire.flush(1)))
        read_until_flushed(1)
        outcome["failed"] = 0
        reader = threading.Thread(target=read_until_flushed, args=(2,))
        before = cpu()
        start = time.perf_counter()
        reader.start()
        for frame in frames:
            sock.sendall(frame)
        sock.sendall(wire.encode_frame(wire.flush(2)))
        reader.join()
        elapsed = time.perf_counter() - start
        used = cpu_delta(before, cpu())
    finally:
        sock.close()
    return {"elapsed": elapsed, "failed": outcome["failed"], "recorders": {}, "cpu": used}


@contextlib.contextmanager
def _environment(name: str, value: str):
    """``name=value`` in the environment the child processes inherit, for the block."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def cpu_delta(before: dict, after: dict) -> dict:
    return {
        name: None if after[name] is None or before[name] is None else after[name] - before[name]
        for name in after
    }


def run_librdkafka(bootstrap: str, args, topic: str, cpu) -> dict:
    import confluent_kafka

    value = b"x" * args.size
    keys = keys_for(args)
    nkeys = len(keys)
    config = {
        "bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": args.linger_ms,
        "batch.size": 262144, "queue.buffering.max.messages": 2_000_000,
        "enable.idempotence": args.acks == "all",
    }
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    failed = [0]

    def on_delivery(err, msg):
        if err is not None:
            failed[0] += 1

    before = cpu()
    start = time.perf_counter()
    for i in range(args.messages):
        while True:
            try:
                producer.produce(topic, value, keys[i % nkeys], on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    used = cpu_delta(before, cpu())

    from .latency import run_in_child

    recorders = run_in_child("librdkafka", {"config": config, **latency_spec(args, topic)})
    return {"elapsed": elapsed, "failed": failed[0], "recorders": recorders, "cpu": used,
            "topic": topic, "through_sidecar": False}


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


class _Stamps:
    """One role's latency-trace lines, found by (topic, partition, offset)."""

    def __init__(self, rows: list[list[str]], last_of, times: int) -> None:
        """``times``: how many fields from the fifth on are times (the rest stay text)."""
        by_tp: dict[tuple[str, int], list] = {}
        for row in rows:
            fields = [float(f) if f else None for f in row[4:4 + times]] + row[4 + times:]
            by_tp.setdefault((row[0], int(row[1])), []).append(
                (int(row[2]), last_of(row), fields))
        self._by_tp = {}
        for tp, entries in by_tp.items():
            entries.sort(key=lambda e: e[0])
            self._by_tp[tp] = ([e[0] for e in entries], entries)

    def base(self, topic: str, partition: int, offset: int) -> int:
        """The first offset of the line ``find`` returns for the same arguments."""
        bases, _entries = self._by_tp[(topic, partition)]
        return bases[bisect.bisect_right(bases, offset) - 1]

    def find(self, topic: str, partition: int, offset: int) -> list | None:
        found = self._by_tp.get((topic, partition))
        if found is None:
            return None
        bases, entries = found
        i = bisect.bisect_right(bases, offset) - 1
        if i < 0 or entries[i][1] < offset:
            return None
        return entries[i][2]


def breakdown(recorder, topic: str, trace_dir: str,
              through_sidecar: bool) -> tuple[list[tuple[str, list[float]]], int]:
    """Per stage, each delivered message's seconds in it (stages add up to its latency),
    and how many messages were found in the traces; ``recorder``: a latency run's
    LatencyRecorder."""
    from databus.service import latency_trace

    broker = _Stamps(latency_trace.read(trace_dir, "broker"), lambda row: int(row[3]), 5)
    producer = _Stamps(latency_trace.read(trace_dir, "producer"),
                       lambda row: int(row[2]) + int(row[3]) - 1, 3)
    names = (["app → the sidecar has queued it (SDK, socket, sidecar)",
              "→ its batch is sent (linger.ms)",
              "→ the broker starts the Produce request"] if through_sidecar else
             ["app → the broker starts the Produce request (librdkafka, linger)"])
    names += ["append", "wait for an fsync round to start", "the fsync round",
              "→ the answer is ready (its turn on the connection)"]
    names += (["→ the sidecar has the answer", "→ the app's callback (reports, SDK, GC)"]
              if through_sidecar else ["→ the app's callback (librdkafka)"])
    stages: list[list[float]] = [[] for _ in names]
    found = 0
    for sent, answered, partition, offset in zip(recorder.sent, recorder.answered,
                                                 recorder.partitions, recorder.offsets):
        a = broker.find(topic, partition, offset)
        b = producer.find(topic, partition, offset) if through_sidecar else None
        if a is None or (through_sidecar and b is None):
            continue
        found += 1
        start, appended, round_start, round_end, ready = a
        if round_start is None:  # acks=0/1, or durable before it asked
            round_start = round_end = appended
        if through_sidecar:
            created, batch_sent, batch_answered, appends = b
            queued = _queued_at(appends, offset - producer.base(topic, partition, offset),
                                created)
            times = [queued - sent, batch_sent - queued, start - batch_sent]
        else:
            times = [start - sent]
        times += [appended - start, round_start - appended, round_end - round_start,
                  ready - round_end]
        times += [batch_answered - ready, answered - batch_answered] if through_sidecar \
            else [answered - ready]
        for column, seconds in zip(stages, times):
            column.append(seconds)
    return list(zip(names, stages)), found


def _queued_at(appends: str, index: int, created: float) -> float:
    """When record ``index`` of a batch was queued: the first ``count@time`` of the trace's
    appends with count > index (the batch's opening if none says)."""
    for stamp in appends.split(",") if appends else ():
        count, _, at = stamp.partition("@")
        if int(count) > index:
            return float(at)
    return created


def breakdown_tables(results, trace_dir: str) -> list[tuple[str, list, list]]:
    """(title, columns, rows) of a table per latency run of each path."""
    from databus.cli_helpers.table import Column

    tables = []
    for name, r in results:
        for rate, recorder in r["recorders"].items():
            stages, found = breakdown(recorder, r["topic"], trace_dir, r["through_sidecar"])
            if not found:
                continue
            totals = _totals(stages)
            slow = _quantile(totals, 0.99)
            tail = [i for i, t in enumerate(totals) if t >= slow]  # the p99 tail's messages
            rows = []
            for stage, seconds in stages:
                in_tail = [seconds[i] for i in tail]
                rows.append((stage, f"{_quantile(seconds, 0.5) * 1000:.2f}",
                             f"{sum(seconds) / len(seconds) * 1000:.2f}",
                             f"{sum(in_tail) / max(1, len(in_tail)) * 1000:.2f}"))
            tables.append((
                f"where the time goes: {name} at {rate:,}/s ({found:,} of "
                f"{len(recorder.sent):,} messages found in the traces)",
                [Column("stage"), Column("p50 ms", justify="right"),
                 Column("mean ms", justify="right"),
                 Column(f"mean of the slowest 1% (≥ {slow * 1000:.2f} ms)", justify="right")],
                rows,
            ))
    return tables


def _totals(stages) -> list[float]:
    """Each message's latency: the sum of its stages."""
    return [sum(values) for values in zip(*(seconds for _stage, seconds in stages))]


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args) -> int:
    from databus.cli_helpers.table import Column, console, print_table

    out = console()
    args.rate_list = [int(r) for r in str(args.rates).split(",") if r.strip()]
    results = []
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(tempfile.TemporaryDirectory(prefix="databus-bench-sidecar-"))
        trace_dir = os.path.join(root, "trace")
        if args.breakdown:  # the broker and sidecar started below stamp every batch
            if args.bootstrap:
                raise SystemExit("--breakdown needs the broker this benchmark starts "
                                 "(leave out --bootstrap-server)")
            from databus.service.latency_trace import ENV

            stack.enter_context(_environment(ENV, trace_dir))
        bootstrap = args.bootstrap
        if not bootstrap:
            from databus.broker.process import BrokerProcess

            broker = stack.enter_context(
                BrokerProcess(root, {"num.partitions": args.partitions})
            )
            bootstrap = broker.bootstrap
        broker_cpu = ProcessCpu(None if args.bootstrap else broker.pid)
        app_cpu = time.process_time
        run_id = int(time.time())
        if args.only in (None, "sidecar", "frames"):
            socket_path, sidecar_pid = stack.enter_context(sidecar_process(root, bootstrap, args))
            sidecar_cpu = ProcessCpu(sidecar_pid)

            def cpu() -> dict:
                return {"app": app_cpu(), "sidecar": sidecar_cpu.seconds(),
                        "broker": broker_cpu.seconds()}

            if args.only in (None, "sidecar"):
                out.print("running: SDK -> sidecar -> broker ...")
                results.append(("SDK → sidecar → broker",
                                run_sdk(socket_path, args, f"bench-sidecar-{run_id}", cpu)))
            if args.only in (None, "frames"):
                out.print("running: frames -> sidecar -> broker ...")
                results.append(("frames → sidecar → broker",
                                run_frames(socket_path, args, f"bench-frames-{run_id}", cpu)))
        if args.only in (None, "librdkafka"):
            out.print("running: confluent-kafka -> broker ...")

            def cpu() -> dict:
                return {"app": app_cpu(), "sidecar": None, "broker": broker_cpu.seconds()}

            results.append(("confluent-kafka → broker",
                            run_librdkafka(bootstrap, args, f"bench-rdkafka-{run_id}", cpu)))
        # read before the temporary directory goes
        tables = breakdown_tables(results, trace_dir) if args.breakdown else []

    keys = f"{args.keys} keys" if args.keys else "no keys"
    headers = ["throughput rec/s", "MB/s", *(f"{who} CPU µs/msg" for who in
                                              ("app", "sidecar", "broker"))]
    for rate in args.rate_list:
        headers += [f"p50 @ {rate:,}/s", f"p99 @ {rate:,}/s"]
    rows = []
    for name, r in results:
        rate = args.messages / r["elapsed"]
        cells = [name, f"{rate:,.0f}", f"{rate * args.size / 1e6:.1f}"]
        for who in ("app", "sidecar", "broker"):
            used = r["cpu"][who]
            cells.append("—" if used is None else f"{used * 1e6 / args.messages:.2f}")
        errors = r["failed"]
        for rate_ in args.rate_list:
            recorder = r["recorders"].get(rate_)
            if recorder is None:  # the frames path measures throughput only
                cells += ["—", "—"]
                continue
            lat = recorder.latencies
            cells += [f"{_quantile(lat, q) * 1000:.2f} ms" for q in (0.5, 0.99)]
            errors += recorder.errors
        rows.append((*cells, str(errors)))
    print_table(
        [Column("path"), *(Column(h, justify="right") for h in (*headers, "errors"))], rows,
        title=f"sidecar benchmark: {args.size}-byte values, {keys}, acks={args.acks}, "
              f"linger.ms={args.linger_ms}, {args.partitions} partitions",
        to=out,
    )
    for title, columns, table_rows in tables:
        print_table(columns, table_rows, title=title, to=out)
    if args.only is None:  # a run of one path is about that path
        print_table([Column("call"), Column("µs", justify="right")],
                    [(name, f"{seconds * 1e6:.2f}") for name, seconds in plugin_call_costs()],
                    title="hot path: why hooks are factories (per call)", to=out)
    return 0
