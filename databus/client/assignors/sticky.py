"""Sticky assignors: ``sticky`` (eager) and ``cooperative-sticky`` (incremental, KIP-429).

Goals, in Kafka's order: (1) balance — partition counts of members differ by at most one
where subscriptions allow it; (2) stickiness — a partition stays with the member that owned
it in the previous generation (taken from each subscription's ``owned_partitions``; a
partition claimed by two members goes to the one with the higher generation).

Algorithm: keep each member's valid owned partitions up to its quota; hand unowned
partitions to the eligible member with the fewest; then move partitions from members with
more than one above an eligible member until no such move exists.

``cooperative-sticky`` runs the same assignment, then (as Kafka's CooperativeStickyAssignor)
withholds every partition that changes owner: this generation the old owner revokes it, and
the follow-up rebalance hands it to the new owner.  Members rejoin at once when their
assignment dropped partitions they owned.
"""

from __future__ import annotations

from ...protocol.consumer_protocol import TopicPartition
from .member import GroupMemberInfo


class StickyAssignor:
    name = "sticky"
    rebalance_protocol = "eager"

    def assign(
        self, members: list[GroupMemberInfo], partitions_per_topic: dict[str, int]
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(members, key=lambda m: m.sort_key)
        subscribed = {m.member_id: set(m.subscription.topics) for m in ordered}
        all_partitions = [
            (t, p) for t in sorted(partitions_per_topic) for p in range(partitions_per_topic[t])
            if any(t in s for s in subscribed.values())
        ]
        eligible = {
            tp: [m.member_id for m in ordered if tp[0] in subscribed[m.member_id]]
            for tp in all_partitions
        }
        n_members = max(len(ordered), 1)
        quota = -(-len(all_partitions) // n_members)  # ceil

        # Previous owners; a partition claimed twice goes to the higher generation.
        owner: dict[TopicPartition, tuple[int, str]] = {}
        for m in ordered:
            gen = m.subscription.generation_id
            for tp in m.subscription.owned_partitions:
                valid = tp in eligible and m.member_id in eligible[tp]
                if valid and (tp not in owner or gen > owner[tp][0]):
                    owner[tp] = (gen, m.member_id)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        for tp in all_partitions:
            prev = owner.get(tp)
            if prev is not None and len(assignment[prev[1]]) < quota:
                assignment[prev[1]].append(tp)
        taken = {tp for tps in assignment.values() for tp in tps}
        for tp in all_partitions:
            if tp in taken:
                continue
            target = min(eligible[tp], key=lambda mid: (len(assignment[mid]), mid))
            assignment[target].append(tp)
        # Balance: move partitions from crowded members to eligible members with two fewer.
        moved = True
        while moved:
            moved = False
            for mid in sorted(assignment, key=lambda k: -len(assignment[k])):
                for tp in list(assignment[mid]):
                    candidates = [
                        other for other in eligible[tp]
                        if len(assignment[other]) + 1 < len(assignment[mid])
                    ]
                    if candidates:
                        target = min(candidates, key=lambda k: (len(assignment[k]), k))
                        assignment[mid].remove(tp)
                        assignment[target].append(tp)
                        moved = True
                        break
                if moved:
                    break
        return {mid: sorted(tps) for mid, tps in assignment.items()}


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    rebalance_protocol = "cooperative"

    def assign(
        self, members: list[GroupMemberInfo], partitions_per_topic: dict[str, int]
    ) -> dict[str, list[TopicPartition]]:
        target = super().assign(members, partitions_per_topic)
        owned_by = {}
        for m in members:
            for tp in m.subscription.owned_partitions:
                owned_by.setdefault(tp, set()).add(m.member_id)
        # Withhold partitions still owned by someone else: they move next generation.
        return {
            mid: [tp for tp in tps if not (owned_by.get(tp, set()) - {mid})]
            for mid, tps in target.items()
        }
