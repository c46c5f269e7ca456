"""Share groups under ACLs, as Kafka checks them: besides READ on the group (checked before
the handler), ShareFetch and ShareAcknowledge need READ on each topic they name, partition by
partition (TOPIC_AUTHORIZATION_FAILED, no records acquired, no acknowledgement applied; the
other partitions are served), and ShareGroupHeartbeat needs DESCRIBE on each subscribed
topic (TOPIC_AUTHORIZATION_FAILED for the request, so no assignment).

User ``sharer`` may consume share-a with group share-group, and nothing of share-b."""

from __future__ import annotations

import uuid

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest
import trio

from databus.client import ShareConsumer, errors
from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from tests.broker.clients import Msg, confluent_produce
from tests.broker.test_api_versions import make
from tests.broker.wire import WireClient

from .conftest import USERS, databus

GROUP, MINE, OTHER = "share-group", "share-a", "share-b"


@pytest.fixture(scope="module")
def sharer(secured, admin_config):
    admin = secured.confluent("SASL_PLAINTEXT", user="admin")
    for topic in (MINE, OTHER):
        confluent_produce(admin["bootstrap.servers"], topic, [Msg(b"k", topic.encode())],
                          **{k: v for k, v in admin.items() if k != "bootstrap.servers"})
    # the group reads from the earliest offset: the records above are already there
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, GROUP, incremental_configs=[
        kadmin.ConfigEntry("share.auto.offset.reset", "earliest",
                           incremental_operation=kadmin.AlterConfigOpType.SET)])
    client = kadmin.AdminClient(admin)
    client.incremental_alter_configs([resource])[resource].result()
    result = databus("acls", "--add", "--allow-principal", "User:sharer", "--consumer",
                     "--topic", MINE, "--group", GROUP, *admin_config)
    assert result.returncode == 0, result.stderr
    return secured


class _Login:
    """A raw connection to the SASL_PLAINTEXT listener logged in as ``sharer`` (PLAIN)."""

    def __init__(self, secured) -> None:
        self.wire = WireClient(secured.broker.bootstrap_for("SASL_PLAINTEXT"))
        assert self.call(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
        auth = f"\0sharer\0{USERS['sharer']}".encode()
        assert self.call(36, 2, auth_bytes=auth).error_code == ErrorCode.none

    def call(self, api_key: int, version: int, **fields):
        return self.wire.request(make(api_key, version, **fields))


def _ids(secured) -> dict[str, uuid.UUID]:
    admin = kadmin.AdminClient(secured.confluent("SASL_PLAINTEXT", user="admin"))
    described = admin.describe_topics(confluent_kafka.TopicCollection([MINE, OTHER]))
    mask = (1 << 64) - 1

    def as_uuid(topic_id) -> uuid.UUID:
        return uuid.UUID(int=(topic_id.get_most_significant_bits() & mask) << 64
                         | topic_id.get_least_significant_bits() & mask)

    return {name: as_uuid(f.result().topic_id) for name, f in described.items()}


def _partitions(response) -> dict[uuid.UUID, tuple]:
    return {t.topic_id: t.partitions[0] for t in response.responses}


def test_share_fetch_serves_the_readable_topic_and_refuses_the_other(sharer):
    ids = _ids(sharer)
    login = _Login(sharer)
    member = str(uuid.uuid4())

    def heartbeat(topics):
        return login.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=GROUP, member_id=member,
                          member_epoch=0, subscribed_topic_names=topics)

    refused = heartbeat([MINE, OTHER])
    assert refused.error_code == ErrorCode.topic_authorization_failed
    assert OTHER in refused.error_message and refused.assignment is None
    assert heartbeat([MINE]).error_code == ErrorCode.none

    def share_fetch(epoch, topics):
        return login.call(
            ApiKey.SHARE_FETCH, 1, group_id=GROUP, member_id=member, share_session_epoch=epoch,
            max_wait=0, min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
            topics=[{"topic_id": ids[t], "partitions": [{"partition_index": 0, **p}]}
                    for t, p in topics.items()], forgotten_topics_data=[])

    fetched = share_fetch(0, {MINE: {}, OTHER: {}})
    assert fetched.error_code == ErrorCode.none
    got = _partitions(fetched)
    assert got[ids[OTHER]].error_code == ErrorCode.topic_authorization_failed
    assert not got[ids[OTHER]].acquired_records and not got[ids[OTHER]].records
    assert got[ids[MINE]].error_code == ErrorCode.none
    assert [(a.first_offset, a.last_offset) for a in got[ids[MINE]].acquired_records] == [(0, 0)]

    # acknowledgements: applied for share-a, refused for share-b (nothing of it was acquired:
    # an applied acknowledgement would be INVALID_RECORD_STATE, not this)
    accept = {"acknowledgement_batches": [
        {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}
    acked = login.call(ApiKey.SHARE_ACKNOWLEDGE, 1, group_id=GROUP, member_id=member,
                       share_session_epoch=1, topics=[
                           {"topic_id": ids[t], "partitions": [{"partition_index": 0, **accept}]}
                           for t in (MINE, OTHER)])
    assert acked.error_code == ErrorCode.none
    codes = {t: p.error_code for t, p in _partitions(acked).items()}
    assert codes == {ids[MINE]: ErrorCode.none, ids[OTHER]: ErrorCode.topic_authorization_failed}

    # the session still holds share-b: each fetch answers it refused, nothing acquired
    again = _partitions(share_fetch(2, {OTHER: accept}))
    assert again[ids[OTHER]].error_code == ErrorCode.topic_authorization_failed
    assert again[ids[OTHER]].acknowledge_error_code == ErrorCode.topic_authorization_failed
    assert not again[ids[OTHER]].acquired_records
    login.wire.close()


def test_share_consumers_subscribed_to_an_unreadable_topic_get_the_authorization_error(sharer):
    bootstrap = sharer.broker.bootstrap_for("SASL_PLAINTEXT")
    consumer = confluent_kafka.ShareConsumer(sharer.confluent(
        "SASL_PLAINTEXT", user="sharer", **{"group.id": GROUP}))
    consumer.subscribe([OTHER])
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        for _ in range(20):
            for message in consumer.poll(0.5) or ():
                assert message.error() is None, message.error()
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer.close()

    async def ours() -> None:
        async with ShareConsumer(bootstrap, {"group.id": GROUP, **sharer.ours(
                "SASL_PLAINTEXT", "PLAIN", user="sharer")}) as consumer:
            consumer.subscribe([OTHER])
            with trio.fail_after(30):
                while True:
                    await consumer.poll(0.5)

    with pytest.raises(errors.for_code(ErrorCode.topic_authorization_failed)):
        trio.run(ours)
