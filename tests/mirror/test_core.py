"""The mirror's pure core: naming, provenance, offset syncs, progress, translation."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.config import parse_config
from databus.mirror import progress as prog
from databus.mirror import provenance
from databus.mirror.naming import TopicNaming
from databus.mirror.translate import OffsetSearch, from_sync
from databus.service.metrics import LatencyHistogram


def naming(**fields):
    config = parse_config({
        "clusters": {"A": {"bootstrap.servers": "h:1", "region": "east"},
                     "B": {"bootstrap.servers": "h:2"}},
        "mirrors": [{"name": "a2b", "source": "A", "target": "B", **fields}],
    })
    return TopicNaming.from_config(config.mirrors[0], "east")


# -- naming -------------------------------------------------------------------------------------


def test_topic_selection_and_rename():
    n = naming(**{"topics": ["orders"], "topics.regex": r"audit\..*",
                  "topics.exclude": [r"audit\.tmp.*"]})
    topics = ["orders", "orders2", "audit.x", "audit.tmp1", "__consumer_offsets",
              "databus-mirror-offset-syncs", "B.orders", "payments"]
    assert n.select(topics) == ["audit.x", "orders"]
    assert n.target_topic("orders") == "A.orders"
    assert naming(topics=["x"], rename="{region}-{topic}").target_topic("x") == "east-x"


def test_copies_from_the_target_are_not_mirrored_back():
    # A->B with {source}.{topic}: B.orders on A is B's own data (mirrored B->A); not sent back.
    n = naming(**{"topics.regex": ".*"})
    assert not n.matches("B.orders")
    assert n.matches("C.orders") and n.matches("orders")
    # names kept: only the provenance header prevents loops
    assert naming(**{"topics.regex": ".*", "rename": "{topic}"}).matches("B.orders")


# -- provenance ----------------------------------------------------------------------------------


def test_provenance_golden_bytes_and_round_trip():
    value = provenance.encode("A", "east", "orders", 3, 12345)
    assert value == b"A/east/orders/3/12345"
    assert provenance.decode(value) == ("A", "east", "orders", 3, 12345)
    assert provenance.decode(b"A//t/0/0").region == ""
    for bad in (b"A/east/orders/3", b"A/e/t/x/1", None):
        with pytest.raises(ValueError):
            provenance.decode(bad)


def test_loop_check_looks_at_every_hop():
    b = provenance.prefix("B")
    one_hop = [("k", b"v"), (provenance.HEADER, b"A/east/t/0/5")]
    two_hops = [*one_hop, (provenance.HEADER, b"B/west/t/0/9")]
    assert not provenance.came_from(one_hop, b)
    assert provenance.came_from(two_hops, b)
    # a cluster whose name starts with another's is a different cluster
    assert not provenance.came_from([(provenance.HEADER, b"BB/x/t/0/1")], b)
    assert provenance.last_from(two_hops, provenance.prefix("A")).offset == 5


# -- offset syncs --------------------------------------------------------------------------------


def test_offset_sync_golden_bytes():
    assert prog.encode_key("a2b", "orders", 7) == b"a2b/orders/7"
    assert prog.encode_value(prog.OffsetSync(1000, 998)) == (
        b"\x00\x00" + (1000).to_bytes(8, "big") + (998).to_bytes(8, "big")
    )
    assert prog.decode_value(prog.encode_value(prog.OffsetSync(5, -1))) == (5, -1)
    with pytest.raises(ValueError, match="version 1"):
        prog.decode_value(b"\x00\x01" + bytes(16))
    with pytest.raises(ValueError, match="3 bytes"):
        prog.decode_value(b"abc")


def test_read_syncs_keeps_the_latest_of_this_mirror():
    v = prog.encode_value
    records = [
        (b"a2b/orders/0", v(prog.OffsetSync(10, 10))),
        (b"other/orders/0", v(prog.OffsetSync(99, 99))),
        (b"a2b/orders/0", v(prog.OffsetSync(20, 21))),
        (b"a2b/orders/1", v(prog.OffsetSync(3, 3))),
        (b"a2b/orders/1", None),  # tombstone
        (b"garbage", b"x"),
        (b"a2b/orders/2", b"short"),
    ]
    assert prog.read_syncs(records, "a2b") == {("orders", 0): (20, 21)}


# -- progress bookkeeping -------------------------------------------------------------------------


def test_progress_advances_over_acknowledged_prefix_only():
    acks = []
    p = prog.PartitionProgress(on_ack=lambda *a: acks.append(a[1:]))
    c1 = p.add([0, 1, 2], [0, 0, 0], 2)
    c2 = p.add([4, 5], [0, 0], 6)  # offset 3 and 6 were skipped by the loop check
    assert p.next_offset is None and p.in_flight == 5
    c2.batch_done(0, 2, 103, -1, None)  # the later chunk answers first
    assert p.acked == (-1, -1)
    c1.batch_done(0, 2, 100, -1, None)  # a chunk split over two batches
    assert p.acked == (-1, -1)
    c1.batch_done(2, 1, 102, -1, None)
    assert p.acked == (6, 104) and p.next_offset == 7 and p.settled
    assert acks == [(0, 2, 103, -1), (0, 2, 100, -1), (2, 1, 102, -1)]
    # a run of records that were all skipped moves the position at once
    p.add([], [], 9)
    assert p.acked == (9, 104) and p.dirty
    p.synced = p.acked
    assert not p.dirty


def test_failure_stops_the_advance_then_rewind_goes_back_to_the_acknowledged_position():
    failures = []
    p = prog.PartitionProgress(prog.OffsetSync(9, 50), on_failure=failures.append)
    c1 = p.add([10, 11], [0, 0], 11)
    c2 = p.add([12], [0], 12)
    c3 = p.add([13], [0], 13)
    c1.batch_done(0, 2, 51, -1, None)
    boom = RuntimeError("timeout")
    c2.batch_done(0, 1, -1, -1, boom)
    c3.batch_done(0, 1, 53, -1, None)  # landed after a gap: not progress
    assert failures == [boom] and p.acked == (11, 52) and p.settled
    assert p.rewind() == 12 and p.failure is None and not p.pending
    c3.batch_done(0, 1, 60, -1, None)  # stale answers from before the rewind are ignored
    assert p.acked == (11, 52)


# -- translation ---------------------------------------------------------------------------------


def test_translation_from_a_sync():
    assert from_sync(prog.OffsetSync(99, 120), 100) == 121  # the group is ahead of the copy
    assert from_sync(prog.OffsetSync(100, 120), 100) is None  # must search
    assert from_sync(None, 5) is None


def copies_with_restarts(n, rng):
    """Target log as a list of source offsets: copied in order, with restarts that go back
    (duplicates), loop-skipped gaps, and foreign records (None) in between."""
    never = {s for s in range(n) if rng.random() < 0.1}  # a source gap, or loop-skipped
    log, position = [], 0
    while position < n:
        run_end = min(n, position + rng.randint(1, 40))
        for s in range(position, run_end):
            if s not in never:
                log.append(s)
            if rng.random() < 0.05:
                log.append(None)
        # a crash: the next run starts from an earlier acknowledged point (duplicates)
        position = run_end if rng.random() < 0.7 else max(0, run_end - rng.randint(1, 30))
    return log


def search(log, committed, start=0):
    s = OffsetSearch(start, len(log), committed)
    while (probe := s.probe()) is not None:
        found = next(((t, log[t]) for t in range(probe, s.end) if log[t] is not None), None)
        s.feed(probe, found)
    return s.result, s.probes


@pytest.mark.parametrize("seed", range(200))
def test_search_never_skips_a_record_and_never_starts_too_early(seed):
    rng = random.Random(seed)
    log = copies_with_restarts(rng.randint(1, 300), rng)
    sources = [s for s in log if s is not None]
    committed = rng.randint(0, max(sources, default=0) + 2)
    result, probes = search(log, committed)
    after = {s for s in log[result:] if s is not None}
    # every source record at or after `committed` that was ever copied appears again after it
    assert {s for s in sources if s >= committed} <= after
    # and the copy just before it came from before `committed` (not needlessly early)
    before = [s for s in log[:result] if s is not None]
    assert not before or before[-1] < committed
    assert probes <= 2 * max(len(log), 1).bit_length() + 2


@settings(max_examples=200, deadline=None)
@given(now=st.integers(0, 10**7), stamps=st.lists(st.integers(-10**7, 2 * 10**7), max_size=40))
def test_a_chunks_ages_count_as_one_observation_each(now, stamps):
    # the mirror counts a chunk's replication latencies at once (LatencyHistogram.observe_ages)
    one_by_one, at_once = LatencyHistogram(), LatencyHistogram()
    for ts in stamps:
        one_by_one.observe(max(now - ts, 0) / 1000)
    at_once.observe_ages(now, stamps)
    assert (at_once.counts, at_once.count) == (one_by_one.counts, one_by_one.count)
    assert at_once.total == pytest.approx(one_by_one.total, rel=1e-9, abs=1e-6)
