"""ACLs end to end: ``databus acls`` and ``databus users`` through the SASL_SSL listener as
the super user; a user limited to one topic and one group can neither read nor write nor see
another topic, nor use another group, nor do cluster operations; an anonymous connection
(PLAINTEXT listener, no ACL) gets nothing; on a SASL listener nothing is answered before the
login; hostile input on the SASL path closes that connection only."""

from __future__ import annotations

import json
import struct

import pytest

from databus.protocol.errors import ErrorCode
from tests.broker.clients import Msg, confluent_consume, confluent_produce
from tests.broker.test_api_versions import make, metadata
from tests.broker.wire import WireClient

from .conftest import USERS, databus


@pytest.fixture(scope="module")
def bob_limited(secured, admin_config):
    """bob may produce to and consume from bob-topic with group bob-group, nothing else."""
    confluent_produce(secured.broker.bootstrap_for("SASL_SSL"), "other-topic",
                      [Msg(b"k", b"secret")], **_conf(secured, "admin"))
    result = databus("acls", "--add", "--allow-principal", "User:bob", "--producer",
                     "--idempotent", "--consumer", "--topic", "bob-topic", "--group", "bob-group",
                     *admin_config)
    assert result.returncode == 0, result.stderr
    return secured


def _conf(secured, user, **extra):
    conf = secured.confluent("SASL_SSL", "SCRAM-SHA-256", user=user, **extra)
    conf.pop("bootstrap.servers")
    return conf


def test_acls_cli_lists_what_it_added(bob_limited, admin_config):
    result = databus("acls", "--list", "--principal", "User:bob", "--json", *admin_config)
    assert result.returncode == 0, result.stderr
    acls = {(a["resource_type"], a["resource_name"], a["operation"])
            for a in json.loads(result.stdout)["acls"]}
    assert acls == {("TOPIC", "bob-topic", op) for op in ("WRITE", "DESCRIBE", "CREATE", "READ")} \
        | {("GROUP", "bob-group", "READ"), ("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")}


def test_limited_user_reads_and_writes_only_its_topic(bob_limited):
    import confluent_kafka

    secured = bob_limited
    bootstrap = secured.broker.bootstrap_for("SASL_SSL")
    confluent_produce(bootstrap, "bob-topic", [Msg(b"k", b"mine")], **_conf(secured, "bob"))
    got = confluent_consume(bootstrap, "bob-topic", 1, timeout=30,
                            **_conf(secured, "bob", **{"group.id": "bob-group"}))
    assert [g.value for g in got] == [b"mine"]

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                         **_conf(secured, "bob")})
    reports = []
    producer.produce("other-topic", b"intrusion", on_delivery=lambda e, m: reports.append(e))
    producer.flush(15)
    del producer
    assert reports and reports[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bob-group",
                                         "auto.offset.reset": "earliest",
                                         **_conf(secured, "bob")})
    try:
        listed = consumer.list_topics(timeout=10).topics
        assert "bob-topic" in listed and "other-topic" not in listed  # hidden, not refused
        consumer.subscribe(["other-topic"])
        error = None
        for _ in range(20):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                error = msg.error()
                break
            assert msg is None, "bob read a message of other-topic"
        assert error is not None and error.code() == \
            confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_limited_user_cannot_use_other_groups_nor_cluster_operations(bob_limited):
    from databus.client import KafkaError, SyncAdmin, SyncConsumer

    secured = bob_limited
    bootstrap = secured.broker.bootstrap_for("SASL_SSL")
    bob = secured.ours("SASL_SSL", "SCRAM-SHA-256", user="bob")
    with SyncConsumer(bootstrap, {**bob, "group.id": "not-bobs", "auto.offset.reset":
                                  "earliest"}) as consumer:
        consumer.subscribe(["bob-topic"])
        with pytest.raises(KafkaError, match="GROUP_AUTHORIZATION_FAILED"):
            for _ in range(40):
                consumer.poll(0.25)
    with SyncAdmin(bootstrap, bob) as admin:
        created = admin.create_topics({"bobs-new-topic": 1})
        assert created["bobs-new-topic"].name == "TOPIC_AUTHORIZATION_FAILED"
        with pytest.raises(KafkaError, match="CLUSTER_AUTHORIZATION_FAILED"):
            admin.describe_acls({"resource_type_filter": 1, "pattern_type_filter": 1,
                                 "operation": 1, "permission_type": 1})
        denied = admin.alter_user_scram_credentials(deletions=[("admin", "SCRAM-SHA-256")])
        assert denied["admin"].name == "CLUSTER_AUTHORIZATION_FAILED"
        assert admin.delete_topics(["other-topic"])["other-topic"].name == \
            "TOPIC_AUTHORIZATION_FAILED"


def test_anonymous_gets_nothing_and_sasl_listener_answers_nothing_before_login(bob_limited):
    secured = bob_limited
    with WireClient(secured.broker.bootstrap_for("PLAINTEXT")) as anonymous:
        answer = metadata(anonymous, [])
        assert answer.topics == ()  # every topic hidden from User:ANONYMOUS
        (topic,) = metadata(anonymous, ["other-topic"]).topics
        assert topic.error_code == ErrorCode.topic_authorization_failed
    with WireClient(secured.broker.bootstrap_for("SASL_PLAINTEXT")) as before_login:
        versions = before_login.request(make(18, 3, client_software_name="t",
                                             client_software_version="1"))
        assert versions.error_code == ErrorCode.none  # ApiVersions is answered
        before_login.send(make(3, 9, topics=None, allow_auto_topic_creation=False,
                               include_cluster_authorized_operations=False,
                               include_topic_authorized_operations=False))
        assert before_login.is_closed_by_peer()


def _handshake(client, mechanism="SCRAM-SHA-256"):
    return client.request(make(17, 1, mechanism=mechanism))


@pytest.mark.parametrize("attack", ["oversized", "out-of-order", "garbage-scram",
                                    "unknown-mechanism", "second-handshake", "truncated",
                                    "huge-frame-before-login"])
def test_hostile_sasl_input_closes_only_that_connection(bob_limited, attack):
    secured = bob_limited
    address = secured.broker.bootstrap_for("SASL_PLAINTEXT")
    with WireClient(address) as client:
        if attack == "oversized":
            _handshake(client)
            answer = client.request(make(36, 2, auth_bytes=b"n,,n=bob,r=" + b"x" * 200_000))
            assert answer.error_code == ErrorCode.sasl_authentication_failed
        elif attack == "out-of-order":
            answer = client.request(make(36, 2, auth_bytes=b"\0bob\0pw"))
            assert answer.error_code == ErrorCode.illegal_sasl_state
        elif attack == "garbage-scram":
            _handshake(client)
            first = client.request(make(36, 2, auth_bytes=b"n,,n=bob,r=abc"))
            assert first.error_code == ErrorCode.none
            answer = client.request(make(36, 2, auth_bytes=b"\xff" * 64))
            assert answer.error_code == ErrorCode.sasl_authentication_failed
        elif attack == "unknown-mechanism":
            answer = _handshake(client, "GSSAPI")
            assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
            assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        elif attack == "second-handshake":
            _handshake(client)
            assert _handshake(client).error_code == ErrorCode.illegal_sasl_state
        elif attack == "truncated":  # says SaslAuthenticate, stops inside its header
            client.send_raw(struct.pack(">ihhi", 10, 36, 2, 1) + b"\0\0")
        else:  # 1 MB before the login: over sasl.server.max.receive.size, never buffered
            client.send_raw(struct.pack(">ihhi", 1 << 20, 36, 2, 1) + b"x" * 1000)
        assert client.is_closed_by_peer()
    # the broker is still up, and a proper login works right after
    with WireClient(address) as client:
        assert _handshake(client, "PLAIN").error_code == ErrorCode.none
        ok = client.request(make(36, 2, auth_bytes=b"\0bob\0" + USERS["bob"].encode()))
        assert ok.error_code == ErrorCode.none
        (topic,) = metadata(client, ["bob-topic"]).topics
        assert topic.error_code == ErrorCode.none


def test_users_cli_online_and_no_secret_anywhere(bob_limited, admin_config, tmp_path):
    secured = bob_limited
    password_file = tmp_path / "carol.pw"
    password_file.write_text("carol-secret-4X\n")
    added = databus("users", "add", "carol", "--mechanism", "SCRAM-SHA-256",
                    "--password-file", str(password_file), *admin_config)
    assert added.returncode == 0, added.stderr
    assert added.stdout == "Set SCRAM-SHA-256 credential of user carol\n"
    listed = databus("users", "list", "--json", *admin_config)
    users = {u["user"]: u["credentials"] for u in json.loads(listed.stdout)["users"]}
    assert users["carol"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    assert {"admin", "bob"} <= set(users)
    # carol can log in now, with the password only she knows
    carol = secured.ours("SASL_PLAINTEXT", "SCRAM-SHA-256", user="bob")
    carol.update({"sasl.username": "carol", "sasl.password": "carol-secret-4X"})
    from databus.client import KafkaError, SyncAdmin

    with SyncAdmin(secured.broker.bootstrap_for("SASL_PLAINTEXT"), carol) as admin:
        admin.list_topics()
    # what `databus users delete` sends; carol cannot log in afterwards
    with SyncAdmin(secured.broker.bootstrap_for("SASL_PLAINTEXT"),
                   secured.ours("SASL_PLAINTEXT")) as admin:
        deleted = admin.alter_user_scram_credentials(deletions=[("carol", "SCRAM-SHA-256")])
        assert deleted == {"carol": None}
    with SyncAdmin(secured.broker.bootstrap_for("SASL_PLAINTEXT"), carol) as admin:
        with pytest.raises(KafkaError, match="invalid credentials"):
            admin.list_topics()
    store = (secured.broker.data_dir / "scram-credentials.json").read_text()
    outputs = added.stdout + added.stderr + listed.stdout + listed.stderr
    for secret in ("carol-secret-4X", *USERS.values()):
        assert secret not in outputs
        assert secret not in store
        assert secret not in secured.broker.log_text()



def test_groups_cli_takes_the_command_config_of_a_secured_cluster(secured, admin_config):
    # A group with a committed offset, made as the super user over SASL_SSL.
    from confluent_kafka import Consumer, TopicPartition

    confluent_produce(secured.broker.bootstrap_for("SASL_SSL"), "groups-cli-topic",
                      [Msg(b"k", b"v")], **_conf(secured, "admin"))
    consumer = Consumer({**secured.confluent("SASL_SSL", "SCRAM-SHA-256"),
                         "group.id": "groups-cli-group", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("groups-cli-topic", 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    # kafka-consumer-groups.sh's habit: the connection options after the action
    described = databus("groups", "describe", "--group", "groups-cli-group", "--json",
                        *admin_config)
    assert described.returncode == 0, described.stderr
    [group] = json.loads(described.stdout)["groups"]
    assert group["group"] == "groups-cli-group"
    assert [(o["topic"], o["partition"], o["current_offset"]) for o in group["offsets"]] \
        == [("groups-cli-topic", 0, 1)]
    # without the settings the SASL_SSL listener cannot be spoken to: a clear failure
    bare = databus("groups", "describe", "--group", "groups-cli-group", "--timeout", "5",
                   "--bootstrap-server", secured.broker.bootstrap_for("SASL_SSL"))
    assert bare.returncode != 0 and bare.stderr.startswith("databus groups:"), bare.stderr
