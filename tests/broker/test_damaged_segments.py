"""On-disk damage in an old segment, met by a real broker process.

- A batch whose length field says 2 GiB: the records before it are served, the fetch that
  reaches it gets CORRUPT_MESSAGE (valid Fetch encoding, golden bytes below), logged once
  however often clients retry, while the other partitions are served in the same response;
  ``databus repair-log`` reports and cuts the range, printing the offsets lost.
- An ``.index`` entry pointing 7 bytes into a batch: the fetch is answered from a scan,
  the index is rewritten as it was, and that is logged once.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys

from databus.protocol.errors import ErrorCode
from databus.protocol.fetch_encoding import PartitionResult, encode_fetch_body
from databus.protocol.records import LOG_OVERHEAD, build_batch, parse_header
from tests.helpers.broker import BrokerProcess

from .test_api_versions import create_topic
from .test_disk_full import scrape
from .test_fetch import fetch, produce_to
from .wire import WireClient

CONFIGS = [("segment.bytes", "2000"), ("index.interval.bytes", "1")]


def batch(i: int) -> bytes:
    return build_batch([(None, b"%d-%d" % (i, r) + b"." * 100, (), 1_700_000_000_000 + i)
                        for r in range(3)])


def base_offsets(records) -> list[int]:
    out, pos = [], 0
    while pos < len(records):
        h = parse_header(records, pos)
        out.append(h.base_offset)
        pos += h.batch_length + LOG_OVERHEAD
    return out


def positions(log_file) -> list[int]:
    data, out, pos = log_file.read_bytes(), [], 0
    while pos < len(data):
        out.append(pos)
        pos += parse_header(data, pos).batch_length + LOG_OVERHEAD
    return out


def repair_log(data_dir, *flags):
    return subprocess.run(
        [sys.executable, "-m", "databus.cli", "repair-log", "--data-dir", str(data_dir),
         "--topic", "dmg", "--partition", "0", *flags],
        capture_output=True, text=True, timeout=60,
    )


def test_corrupt_message_fetch_partition_golden_bytes():
    body = b"".join(encode_fetch_body(
        11, [("dmg", [PartitionResult(0, ErrorCode.corrupt_message)])]))
    assert body == bytes.fromhex(
        "00000000" "0000" "00000000"  # throttle, error, session id
        "00000001" "0003" + b"dmg".hex() +  # one topic
        "00000001" "00000000" "0002"  # one partition, index 0, CORRUPT_MESSAGE
        "ffffffffffffffff" "ffffffffffffffff" "ffffffffffffffff"  # hw, lso, log start: -1
        "ffffffff"  # aborted transactions: null
        "ffffffff"  # preferred read replica: -1
        "00000000"  # records: empty, never null
    )


def test_damaged_batch_and_index_entry_in_old_segments(tmp_path):
    broker = BrokerProcess(tmp_path, {"num.partitions": 1},
                           args=("--metrics-listen", "127.0.0.1:0"))
    with broker:
        with WireClient(broker.bootstrap) as client:
            create_topic(client, "dmg", partitions=2, configs=CONFIGS)
            create_topic(client, "idx", partitions=1, configs=CONFIGS)
            for i in range(6):  # 3 records each: offsets 3i..3i+2, 5 batches a segment
                produce_to(client, "dmg", 0, batch(i))
                produce_to(client, "idx", 0, batch(i))
            produce_to(client, "dmg", 1, batch(0))
        assert broker.stop() == 0
        first = broker.data_dir / "dmg-0" / f"{0:020d}.log"
        at = positions(first)
        assert len(at) == 5 and (broker.data_dir / "dmg-0" / f"{15:020d}.log").exists()
        with open(first, "r+b") as f:  # batch 2 (offsets 6..8) claims 2 GiB
            f.seek(at[2] + 8)
            f.write(struct.pack(">i", 2**31 - 1))
        index = broker.data_dir / "idx-0" / f"{0:020d}.index"
        good_index = index.read_bytes()
        entries = [struct.unpack_from(">II", good_index, i) for i in range(0, len(good_index), 8)]
        assert len(entries) >= 3
        with open(index, "r+b") as f:  # the middle entry points 7 bytes into its batch
            f.seek(8 + 4)
            f.write(struct.pack(">I", entries[1][1] + 7))

        broker.start()
        with WireClient(broker.bootstrap) as client:
            parts = fetch(client, "dmg", {0: 0, 1: 0})
            assert parts[0].error_code == ErrorCode.none
            assert base_offsets(parts[0].records) == [0, 3]  # everything before the damage
            for _ in range(3):  # clients retry: the answer is the same, the log line is not
                parts = fetch(client, "dmg", {0: 6, 1: 0})
                assert parts[0].error_code == ErrorCode.corrupt_message
                assert parts[0].records == b""
                assert parts[1].error_code == ErrorCode.none
                assert base_offsets(parts[1].records) == [0]
            # a seek for the offset after the damaged entry's batch goes through that entry
            wanted = entries[1][0] + 1
            (part,) = fetch(client, "idx", {0: wanted}).values()
            assert part.error_code == ErrorCode.none
            assert base_offsets(part.records)[0] == wanted
            (part,) = fetch(client, "idx", {0: wanted}).values()
            assert base_offsets(part.records)[0] == wanted
        log = broker.log_text()
        port = re.findall(r"metrics on http://127.0.0.1:(\d+)/metrics", log)[-1]
        metrics = scrape(int(port))
        assert "databus_broker_damaged_batches_total 1" in metrics
        assert "databus_broker_index_repairs_total 1" in metrics
        assert log.count("damaged batch at byte") == 1, log[-3000:]
        assert f"dmg-0: {first}: damaged batch at byte {at[2]}" in log
        assert log.count("does not point at that offset's batch") == 1
        assert "Traceback" not in log
        assert index.read_bytes() == good_index  # rebuilt as it was

        refused = repair_log(broker.data_dir)
        assert refused.returncode == 1 and "is in use by process" in refused.stderr
        assert broker.stop() == 0
        report = repair_log(broker.data_dir)
        assert report.returncode == 1
        assert report.stdout.splitlines() == [
            f"{first}: bytes {at[2]}..{at[3] - 1} damaged (batch at byte {at[2]} claims "
            f"{2**31 - 1 + LOG_OVERHEAD} bytes but only {first.stat().st_size - at[2]} remain); "
            "offsets 6..8 lost",
            "1 damaged range(s); nothing changed: run again with --apply to cut them out",
        ]
        applied = repair_log(broker.data_dir, "--apply")
        assert applied.returncode == 0 and "offsets 6..8 lost" in applied.stdout
        assert repair_log(broker.data_dir).stdout == "dmg-0: no damaged batches\n"

        broker.start()
        with WireClient(broker.bootstrap) as client:
            parts = fetch(client, "dmg", {0: 6})
            assert parts[0].error_code == ErrorCode.none
            assert base_offsets(parts[0].records)[0] == 9  # the consumer skips the cut range
