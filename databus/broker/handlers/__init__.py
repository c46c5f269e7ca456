"""The broker's handler modules, one per Kafka API family, and the one list of what a broker
answers: ``handler_table()``.

Each handler declares its API key and version range with ``@handles`` next to its code; a
handler is answered only if it is listed below.  ``Broker.__init__`` builds its own table
from this function (two brokers in one process share nothing), the server dispatches
through it, ApiVersions advertises it and docs/protocol.md is generated from it.
"""

from __future__ import annotations

from ..api import HandlerTable, build_table


def handler_table() -> HandlerTable:
    """api key -> Registration for every API this broker answers."""
    # Imported here, not at module level: handler modules import ``databus.broker.broker``
    # (which builds its table from this function).
    from . import (
        admin,
        api_versions,
        delete_records,
        fetch,
        groups,
        init_producer_id,
        list_offsets,
        metadata,
        offsets,
        partitions,
        produce,
        reassignments,
        sasl,
        security,
        share,
        telemetry,
        transactions,
    )

    return build_table([
        api_versions.api_versions,
        metadata.metadata,
        produce.produce,
        fetch.fetch,
        list_offsets.list_offsets,
        admin.create_topics,
        admin.delete_topics,
        admin.create_partitions,
        admin.describe_configs,
        admin.alter_configs,
        admin.incremental_alter_configs,
        admin.describe_cluster,
        admin.describe_log_dirs,
        admin.list_config_resources,
        reassignments.alter_partition_reassignments,
        reassignments.list_partition_reassignments,
        delete_records.delete_records,
        partitions.offset_for_leader_epoch,
        partitions.describe_producers,
        partitions.describe_topic_partitions,
        telemetry.get_telemetry_subscriptions,
        telemetry.push_telemetry,
        init_producer_id.init_producer_id,
        groups.find_coordinator,
        groups.join_group,
        groups.sync_group,
        groups.heartbeat,
        groups.leave_group,
        groups.list_groups,
        groups.describe_groups,
        groups.delete_groups,
        groups.consumer_group_heartbeat,
        groups.consumer_group_describe,
        offsets.offset_commit,
        offsets.offset_fetch,
        offsets.offset_delete,
        share.share_group_heartbeat,
        share.share_group_describe,
        share.share_fetch,
        share.share_acknowledge,
        share.describe_share_group_offsets,
        share.alter_share_group_offsets,
        share.delete_share_group_offsets,
        transactions.add_partitions_to_txn,
        transactions.add_offsets_to_txn,
        transactions.end_txn,
        transactions.write_txn_markers,
        transactions.txn_offset_commit,
        sasl.sasl_handshake,
        sasl.sasl_authenticate,
        security.describe_acls,
        security.create_acls,
        security.delete_acls,
        security.describe_user_scram_credentials,
        security.alter_user_scram_credentials,
    ])
