"""Which topics are internal: a system's own bookkeeping rather than anyone's data.

The one home for the question.  ``is_kafka_internal`` is Kafka's own rule (a name starting
with ``__``: ``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``), the
topics the broker alone writes and Metadata flags ``is_internal``.  ``is_internal`` adds
the topics other systems keep for themselves, as Kafka UIs (kafka-ui, AKHQ) hide them:

* databus's: the delay service's levels and cancel topic (``databus-delay-*``), the
  half-message service's (``databus-txn-*``), the lanes registry (``databus-lanes``), the
  mirrors' offset syncs (``databus-mirror-offset-syncs``);
* any name starting with ``_``: Confluent's ``_schemas`` (Schema Registry),
  ``_confluent-*``, ``_connect-*``;
* Kafka Connect's default ``connect-offsets``, ``connect-configs``, ``connect-status``;
* MirrorMaker 2's ``*.internal`` topics (``mm2-offset-syncs.*.internal``,
  ``*.checkpoints.internal``) and Kafka Streams' ``*-changelog`` / ``*-repartition``.

A topic the cluster flags internal (Metadata's ``is_internal``) is internal whatever its
name: ``is_internal(name, flagged)``.
"""

from __future__ import annotations

KAFKA_PREFIX = "__"
PREFIXES = ("_", "databus-delay-", "databus-txn-")
NAMES = frozenset({
    "databus-lanes", "databus-mirror-offset-syncs",
    "connect-offsets", "connect-configs", "connect-status",
})
SUFFIXES = (".internal", "-changelog", "-repartition")


def is_kafka_internal(name: str) -> bool:
    """Kafka's internal topics: only the broker writes them, clients may not create them."""
    return name.startswith(KAFKA_PREFIX)


def is_internal(name: str, flagged: bool = False) -> bool:
    """Internal by Kafka's rule, by the cluster's flag, or as another system's own topic."""
    return (flagged or name.startswith(PREFIXES) or name in NAMES
            or name.endswith(SUFFIXES))
