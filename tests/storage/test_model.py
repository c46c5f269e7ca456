"""Hypothesis stateful test: the storage engine against an in-memory oracle.

Random appends (several batches per request, varied sizes), reads at random offsets and
sizes, forced rolls, retention, clean restarts, unclean restarts (with and without a torn
tail added to the active segment), and reads at every offset.  Every read must return whole
batches, starting at the one holding the offset, byte-identical to what was appended.
"""

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from databus.protocol.records import build_batch, iter_headers, parse_header
from databus.storage.config import LogConfig
from databus.storage.log_manager import LogManager

from .conftest import Clock

records_st = st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=6)
request_st = st.lists(records_st, min_size=1, max_size=3)


class StorageModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="databus-model-")
        self.clock = Clock()
        self.batches: dict[int, tuple[int, bytes]] = {}  # base offset -> (last, bytes[8:])
        self.max_ts: dict[int, int] = {}  # base offset -> batch max timestamp
        self.next_offset = 0
        self.log_start = 0
        self.ts = 1_000
        self.lm = None

    @initialize(segment_bytes=st.integers(200, 3000), index_interval=st.integers(0, 400),
                retention_bytes=st.integers(500, 6000))
    def start(self, segment_bytes, index_interval, retention_bytes):
        self.overrides = {"segment.bytes": str(segment_bytes),
                          "index.interval.bytes": str(index_interval),
                          "retention.bytes": str(retention_bytes), "retention.ms": "-1"}
        self.lm = LogManager(self.dir, LogConfig(), clock=self.clock)
        self.lm.open()
        self.lm.create_topic("m", 1, self.overrides)

    @property
    def log(self):
        return self.lm.get_log("m", 0)

    def teardown(self):
        if self.lm is not None:
            for plog in self.lm.logs():
                plog.delete()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(request=request_st)
    def append(self, request):
        parts = []
        for values in request:
            self.ts += 10
            parts.append(build_batch([(None, v, (), self.ts + i) for i, v in enumerate(values)]))
        info = self.log.append(b"".join(parts))
        assert info.first_offset == self.next_offset
        for raw, values in zip(parts, request):
            self.batches[self.next_offset] = (self.next_offset + len(values) - 1, raw[8:])
            self.max_ts[self.next_offset] = parse_header(raw).max_timestamp
            self.next_offset += len(values)
        assert info.last_offset == self.next_offset - 1

    @rule(data=st.data())
    def read(self, data):
        offset = data.draw(st.integers(self.log_start, self.next_offset))
        max_bytes = data.draw(st.integers(1, 3000))
        self.check_read(offset, max_bytes)

    def check_read(self, offset, max_bytes):
        out = self.log.read(offset, max_bytes)
        if offset == self.next_offset:
            assert out == b""
            return
        got = list(iter_headers(out))
        assert got, f"no batch for offset {offset}"
        assert sum(h.size for _, h in got) == len(out), "only whole batches"
        assert len(got) == 1 or len(out) <= max_bytes
        first = got[0][1]
        assert first.base_offset <= offset <= first.last_offset
        for pos, h in got:
            last, tail = self.batches[h.base_offset]
            assert h.last_offset == last
            assert out[pos + 8: pos + h.size] == tail

    @rule()
    def roll(self):
        self.log.roll()

    @rule(age=st.integers(0, 300))
    def time_retention(self, age):
        """Only retention.ms = age for one run at the newest timestamp, then as before."""
        self.lm.alter_topic_config("m", {"retention.ms": str(age), "retention.bytes": "-1"},
                                   incremental=True)
        now = self.ts + 10
        self.lm.run_retention(now_ms=now)
        self.lm.alter_topic_config("m", self.overrides, incremental=True)
        plog = self.log
        assert plog.log_start_offset <= plog.active_segment.base_offset
        for base in [b for b in self.batches if b < plog.log_start_offset]:
            assert now - self.max_ts[base] > age, "deleted a batch inside retention.ms"
            del self.batches[base]
        self.log_start = plog.log_start_offset

    @rule()
    def retention(self):
        before = self.log.log_start_offset
        self.lm.run_retention()
        plog = self.log
        assert plog.log_start_offset >= before
        assert plog.log_start_offset <= plog.active_segment.base_offset
        limit = int(self.overrides["retention.bytes"])
        if plog.log_start_offset > before:
            assert plog.size_in_bytes >= limit
        self.log_start = plog.log_start_offset
        assert self.log_start in self.batches or self.log_start == self.next_offset
        for base in [b for b in self.batches if b < self.log_start]:
            del self.batches[base]

    @rule()
    def restart_clean(self):
        self.lm.close()
        self.lm = LogManager(self.dir, LogConfig(), clock=self.clock)
        assert self.lm.open() == []

    @rule(flush=st.booleans(), torn=st.binary(min_size=0, max_size=100))
    def restart_unclean(self, flush, torn):
        if flush:
            self.lm.flush_all()
            self.lm.write_checkpoints()
        active = self.log.active_segment.log_path
        for plog in self.lm.logs():
            plog.delete()
        if torn:
            with open(active, "ab") as f:
                f.write(torn)
        self.lm = LogManager(self.dir, LogConfig(), clock=self.clock)
        self.lm.open()

    @precondition(lambda self: self.lm is not None)
    @invariant()
    def offsets_agree(self):
        plog = self.log
        assert plog.log_end_offset == self.next_offset
        assert plog.log_start_offset == self.log_start
        assert plog.recovery_point <= plog.log_end_offset

    @rule()
    def read_every_offset(self):
        for offset in range(self.log_start, self.next_offset + 1):
            self.check_read(offset, 1)


StorageModel.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestStorageModel = StorageModel.TestCase
