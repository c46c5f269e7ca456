"""Child process of test_crash: appends forever with durable acks until killed.

The main thread appends 1-3 batches at a time as idempotent producer ``seed + 1`` (epoch 0,
sequences from 0); a flusher thread fsyncs (group commit, as the
broker does) and, after each fsync, reports every batch now below the recovery point on
stdout as ``base last hex(bytes[8:])``, the acknowledgement a producer with acks=all gets.
"""

import os
import random
import sys
import threading

from databus.protocol.records import build_batch
from databus.storage.config import LogConfig
from databus.storage.log_manager import LogManager


def main(data_dir: str, seed: int) -> None:
    rng = random.Random(seed)
    lm = LogManager(data_dir, LogConfig(), checkpoint_interval_ms=20)
    lm.open()
    if "crash" not in lm.topics():
        lm.create_topic("crash", 1, {"segment.bytes": "16384", "index.interval.bytes": "512"})
    plog = lm.get_log("crash", 0)
    pending: list[tuple[int, int, bytes]] = []
    lock = threading.Lock()
    out = sys.stdout

    def flusher() -> None:
        while True:
            lm.flush_all()
            durable = plog.recovery_point
            with lock:
                acked = [p for p in pending if p[1] < durable]
                del pending[: len(acked)]
            if acked:
                out.write("".join(f"{b} {last} {raw.hex()}\n" for b, last, raw in acked))
                out.flush()

    threading.Thread(target=flusher, daemon=True).start()
    counter = 0
    sequence = 0
    while True:
        parts = []
        for _ in range(rng.randint(1, 3)):
            n = rng.randint(1, 8)
            parts.append(build_batch([(b"k%d" % counter, os.urandom(rng.randint(0, 200)), (),
                                       1_000 + counter + i) for i in range(n)],
                                     producer_id=seed + 1, producer_epoch=0,
                                     base_sequence=sequence))
            counter += 1
            sequence += n
        info = plog.append(b"".join(parts))
        with lock:
            for (base, h), raw in zip(info.batches, parts):
                pending.append((base, base + h.last_offset_delta, raw[8:]))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
