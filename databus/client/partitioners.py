"""Partitioners: plain callables ``partition(topic, key, value, partition_count) -> int``.

``DefaultPartitioner`` matches the Java client exactly: a keyed record goes to
``(murmur2(key) & 0x7fffffff) % partition_count`` (murmur2 with seed 0x9747b28c, Kafka's
``Utils.murmur2``); a record without a key goes to the topic's current *sticky* partition
(KIP-480/794), which changes only when the batch being filled for it completes.  The
accumulator tells the partitioner so by calling ``batch_completed(topic, partition)`` when
the partitioner has that method — that is the hook, so a stateless callable needs nothing.

An explicit partition on send always wins; partitioners are not consulted then.

``PARTITIONERS`` maps the names accepted by the ``partitioner`` setting to factories; call one
to get a fresh partitioner (they can hold per-topic state, so producers do not share them).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from ..protocol.speedups import native as _native

Partitioner = Callable[[str, "bytes | None", "bytes | None", int], int]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2_py(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2, seed 0x9747b28c, as a signed int32.

    The reference; ``murmur2`` is the C extension's twin when it is there (speedups.py)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    if whole:
        for (k,) in struct.iter_unpack("<I", data[:whole]):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


murmur2 = murmur2_py if _native is None else _native.murmur2


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs, which fails for MIN_VALUE)."""
    return n & 0x7FFFFFFF


# Keys repeat (customer ids, device ids...): a dict lookup costs ~40 ns where hashing in
# Python costs over 1 µs.  Bounded: when full it is emptied and refills with what is hot.
_HASH_CACHE: dict[bytes, int] = {}
HASH_CACHE_SIZE = 1 << 16


def murmur2_partition(key: bytes, partition_count: int) -> int:
    """Java's partition for a key: ``toPositive(murmur2(key)) % partition_count``."""
    h = _HASH_CACHE.get(key)
    if h is None:
        h = to_positive(murmur2(key))
        if len(_HASH_CACHE) >= HASH_CACHE_SIZE:
            _HASH_CACHE.clear()
        _HASH_CACHE[key] = h
    return h % partition_count


class DefaultPartitioner:
    """Java's built-in partitioner: murmur2 for keys, sticky partition for null keys."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        # topic -> index of its current sticky partition.  Public for Producer.send's fast
        # path: a keyless record whose topic has one in range goes there without a call.
        self.sticky: dict[str, int] = {}
        self._completed: dict[str, int] = {}

    def __call__(self, topic: str, key: bytes | None, value: bytes | None, n: int) -> int:
        if key is not None:
            return murmur2_partition(key, n)
        current = self.sticky.get(topic)
        if current is None or current >= n:
            current = self._rng.randrange(n)
            # KIP-480: after a batch completes, null keys move to a *different* partition.
            previous = self._completed.pop(topic, None)
            if n > 1 and previous == current:
                current = (current + 1 + self._rng.randrange(n - 1)) % n
            self.sticky[topic] = current
        return current

    def batch_completed(self, topic: str, partition: int) -> None:
        """Accumulator hook: the batch for ``partition`` is full/sent; move null keys on."""
        if self.sticky.get(topic) == partition:
            del self.sticky[topic]
            self._completed[topic] = partition


class Murmur2Partitioner:
    """murmur2 for keys (Java-compatible), random for null keys: librdkafka's murmur2_random."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(self, topic: str, key: bytes | None, value: bytes | None, n: int) -> int:
        if key is not None:
            return murmur2_partition(key, n)
        return self._rng.randrange(n)


class RoundRobinPartitioner:
    """Every record to the next partition of its topic, keys ignored (Java's RoundRobinPartitioner)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def __call__(self, topic: str, key: bytes | None, value: bytes | None, n: int) -> int:
        i = self._next.get(topic, 0)
        self._next[topic] = i + 1
        return i % n


class RandomPartitioner:
    """A uniformly random partition, keys ignored."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(self, topic: str, key: bytes | None, value: bytes | None, n: int) -> int:
        return self._rng.randrange(n)


PARTITIONERS: dict[str, Callable[[], Partitioner]] = {
    "default": DefaultPartitioner,
    "murmur2": Murmur2Partitioner,
    "round_robin": RoundRobinPartitioner,
    "random": RandomPartitioner,
}
