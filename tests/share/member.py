"""A share-group member spoken by hand over the wire (RawClient), for tests that need every
request visible: heartbeat, ShareFetch, ShareAcknowledge."""

from __future__ import annotations

import uuid

import confluent_kafka

from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from tests.groups.raw import RawClient

ACCEPT, RELEASE, REJECT = 1, 2, 3
TOPIC = "work"


def produce(bootstrap: str, count: int, topic: str = TOPIC) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"record-%d" % i)
    assert producer.flush(30) == 0


class Member:
    """One share-group member spoken by hand: heartbeat, then share session requests."""

    def __init__(self, client: RawClient, group: str = "g", member_id: str | None = None):
        self.client = client
        self.group = group
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.session_epoch = 0
        self.topic_id: uuid.UUID | None = None

    def heartbeat(self, epoch: int | None = None, topics=(TOPIC,)):
        response = self.client.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": self.group, "member_id": self.member_id,
            "member_epoch": self.epoch if epoch is None else epoch,
            "subscribed_topic_names": list(topics) if topics is not None else None,
        })
        if response.error_code == ErrorCode.none:
            self.epoch = response.member_epoch
            if response.assignment and response.assignment.topic_partitions:
                self.topic_id = response.assignment.topic_partitions[0].topic_id
        return response

    def fetch(self, acks=(), *, epoch: int | None = None, max_wait_ms: int = 500,
              max_records: int = 500, version: int = 1, **v2_fields):
        partitions = [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
            for f, last, t in acks]}]
        response = self.client.call(ApiKey.SHARE_FETCH, version, {**v2_fields,
            "group_id": self.group, "member_id": self.member_id,
            "share_session_epoch": self.session_epoch if epoch is None else epoch,
            "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "max_records": max_records, "batch_size": max_records,
            "topics": [{"topic_id": self.topic_id, "partitions": partitions}]
            if self.session_epoch == 0 or acks else [],
            "forgotten_topics_data": [],
        })
        if response.error_code == ErrorCode.none and epoch is None:
            self.session_epoch += 1
        return response

    def acknowledge(self, acks, *, epoch: int | None = None, version: int = 1, **v2_fields):
        response = self.client.call(ApiKey.SHARE_ACKNOWLEDGE, version, {**v2_fields,
            "group_id": self.group, "member_id": self.member_id,
            "share_session_epoch": self.session_epoch if epoch is None else epoch,
            "topics": [{"topic_id": self.topic_id, "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                    for f, last, t in acks]}]}],
        })
        if response.error_code == ErrorCode.none and epoch is None:
            self.session_epoch += 1
        return response


def acquired(response) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def partition_of(response):
    return response.responses[0].partitions[0]
