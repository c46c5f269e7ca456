"""Partitioners: Kafka's murmur2 vectors, Java-compatible key placement, sticky null keys."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from databus.client import partitioners
from databus.client.partitioners import (
    PARTITIONERS,
    DefaultPartitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    murmur2,
    murmur2_partition,
    to_positive,
)

# Kafka's UtilsTest.testMurmur2 vectors (clients/src/test/java/org/apache/kafka/common/utils).
KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize("data,expected", KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka_vectors(data, expected):
    assert murmur2(data) == expected


def test_to_positive_clears_sign_bit_not_abs():
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; Kafka masks
    assert to_positive(-1) == 2**31 - 1


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_keyed_partition_in_range_and_stable(key, n):
    p = murmur2_partition(key, n)
    assert 0 <= p < n
    assert DefaultPartitioner()("t", key, b"v", n) == p
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.lists(st.binary(max_size=24), min_size=1, max_size=50),
       st.integers(min_value=1, max_value=64))
def test_cached_key_placement_equals_hashing_even_past_the_cache_bound(keys, n):
    """The hash cache is an optimisation only: whatever it holds, and however often it is
    emptied (a bound of 8 here), every key lands where murmur2 puts it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partitioners, "HASH_CACHE_SIZE", 8)
        patch.setattr(partitioners, "_HASH_CACHE", {})
        for key in keys * 2:
            assert murmur2_partition(key, n) == to_positive(murmur2(key)) % n
        assert len(partitioners._HASH_CACHE) <= 8


def test_default_sticky_for_null_keys_until_batch_completes():
    part = DefaultPartitioner(random.Random(7))
    first = part("t", None, b"x", 8)
    assert all(part("t", None, b"x", 8) == first for _ in range(50))
    part.batch_completed("t", first)  # the accumulator's hook
    second = part("t", None, b"x", 8)
    assert second != first  # KIP-480: a completed batch moves null keys to another partition
    part.batch_completed("t", (second + 1) % 8)  # another partition's batch: no switch
    assert part("t", None, b"x", 8) == second


def test_default_sticky_spreads_over_partitions_across_batches():
    part = DefaultPartitioner(random.Random(1))
    seen = Counter()
    for _ in range(400):
        p = part("t", None, b"x", 4)
        seen[p] += 1
        part.batch_completed("t", p)
    assert set(seen) == {0, 1, 2, 3}


def test_round_robin_ignores_keys_and_cycles():
    part = RoundRobinPartitioner()
    assert [part("t", b"same", None, 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert part("other", None, None, 3) == 0  # per topic


def test_random_partitioner_in_range():
    part = RandomPartitioner(random.Random(3))
    got = {part("t", b"k", None, 5) for _ in range(200)}
    assert got == {0, 1, 2, 3, 4}


def test_registry_names_make_fresh_instances():
    assert set(PARTITIONERS) == {"default", "murmur2", "round_robin", "random"}
    a, b = PARTITIONERS["round_robin"](), PARTITIONERS["round_robin"]()
    a("t", None, None, 2)
    assert b("t", None, None, 2) == 0
    assert PARTITIONERS["murmur2"]()("t", b"foobar", None, 10) == murmur2_partition(b"foobar", 10)
