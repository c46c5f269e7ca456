"""Server-side partition assignors of the consumer group protocol (KIP-848): Kafka's
``uniform`` and ``range`` (``group.consumer.assignors``, the first is the default; a member
may name one as its ``server_assignor``).

Pure functions: members' subscribed topics (by topic id) and the topics' partition counts
in, the target assignment (member id -> topic id -> partitions) out.  Both are
deterministic, so a broker that replays the same inputs computes the same target.

- ``uniform``: every partition of the subscribed topics to one member, the counts as even
  as the subscriptions allow, and sticky: a partition stays with its current target owner
  unless balance requires the move (Kafka's UniformAssignor aims for the same; its exact
  choices among equally balanced answers may differ).
- ``range``: per topic, the members subscribed to it (sorted by member id) get contiguous
  ranges, the first ``partitions % members`` one partition more (Kafka's RangeAssignor).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from databus.protocol.internal_records.consumer_groups import Assignment

Assignor = Callable[[Mapping[str, frozenset[uuid.UUID]], Mapping[uuid.UUID, int],
                     Mapping[str, Assignment]], dict[str, Assignment]]

UNIFORM = "uniform"
RANGE = "range"
DEFAULT_ASSIGNORS = (UNIFORM, RANGE)


def _to_assignment(owned: Mapping[str, set[tuple[uuid.UUID, int]]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member, tps in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, set()).add(partition)
        out[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def uniform(subscriptions: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
            current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Balanced and sticky (see the module docstring)."""
    if len(set(subscriptions.values())) <= 1:
        return _uniform_homogeneous(subscriptions, partitions, current)
    return _uniform_heterogeneous(subscriptions, partitions, current)


def _uniform_homogeneous(subscriptions: Mapping[str, frozenset[uuid.UUID]],
                         partitions: Mapping[uuid.UUID, int],
                         current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Every member subscribes to the same topics (the common case), in O(P log P): each
    member's quota is P // M, one more for the P % M members holding the most now; each
    keeps its current partitions up to its quota, the rest go to those below theirs."""
    members = sorted(subscriptions)
    if not members:
        return {}
    topics = next(iter(subscriptions.values()))
    every = [(t, p) for t in sorted(topics, key=str) for p in range(partitions.get(t, 0))]
    valid = set(every)
    held = {m: sorted(((t, p) for t, ps in current.get(m, {}).items() for p in ps
                       if (t, p) in valid), key=lambda tp: (str(tp[0]), tp[1]))
            for m in members}
    base, extra = divmod(len(every), len(members))
    by_holding = sorted(members, key=lambda m: (-len(held[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    for m in members:
        for tp in held[m]:
            if len(owned[m]) < quota[m] and tp not in taken:
                owned[m].add(tp)
                taken.add(tp)
    free = iter(tp for tp in every if tp not in taken)
    for m in members:
        while len(owned[m]) < quota[m]:
            owned[m].add(next(free))
    return _to_assignment(owned)


def _uniform_heterogeneous(subscriptions: Mapping[str, frozenset[uuid.UUID]],
                           partitions: Mapping[uuid.UUID, int],
                           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    all_partitions = [(t, p) for t in sorted(partitions, key=str)
                      for p in range(partitions[t])
                      if any(t in subscriptions[m] for m in members)]
    owner: dict[tuple[uuid.UUID, int], str] = {}
    # 1. stickiness: keep every partition with its current owner while still subscribed
    for member in members:
        for topic, parts in current.get(member, {}).items():
            if topic in subscriptions[member]:
                for p in parts:
                    if p < partitions.get(topic, 0):
                        owner[(topic, p)] = member
                        owned[member].add((topic, p))

    def eligible(tp: tuple[uuid.UUID, int]) -> list[str]:
        return [m for m in members if tp[0] in subscriptions[m]]

    # 2. the unowned ones to the least loaded subscriber each
    for tp in all_partitions:
        if tp not in owner:
            target = min(eligible(tp), key=lambda m: (len(owned[m]), m))
            owner[tp] = target
            owned[target].add(tp)
    # 3. balance: move from the most to the least loaded subscriber while they differ by 2+
    moved = True
    while moved:
        moved = False
        for giver in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[giver], key=lambda tp: (str(tp[0]), tp[1]), reverse=True):
                taker = min(eligible(tp), key=lambda m: (len(owned[m]), m))
                if len(owned[giver]) - len(owned[taker]) > 1:
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
    return _to_assignment(owned)


def range_(subscriptions: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Contiguous ranges per topic (see the module docstring)."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in subscriptions}
    for topic in sorted(partitions, key=str):
        subscribers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not subscribers:
            continue
        count = partitions[topic]
        base, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = base + (1 if i < extra else 0)
            owned[member].update((topic, p) for p in range(start, start + size))
            start += size
    return _to_assignment(owned)


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}

# Kafka's class names for the same assignors (group.consumer.assignors takes either)
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


def parse_assignors(value: str) -> tuple[str, ...]:
    """``group.consumer.assignors``: names (or Kafka's class names), comma separated;
    ValueError naming the unknown one."""
    names = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        name = _CLASS_NAMES.get(part, part)
        if name not in ASSIGNORS:
            raise ValueError(f"unknown assignor {part!r} (known: {', '.join(ASSIGNORS)})")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("at least one assignor is needed")
    return tuple(names)
