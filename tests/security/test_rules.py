"""The pure parts: SCRAM against RFC 7677's published exchange (golden bytes), the server
side against malformed and out-of-order messages, PLAIN parsing, ACL matching and Kafka's
authorization rules, listener parsing."""

from __future__ import annotations

import pytest

from databus.broker.authorizer import Authorizer
from databus.broker.config import BrokerConfig, BrokerConfigError
from databus.broker.listeners import certificate_principal, parse_listeners
from databus.protocol.sasl import (
    SaslError,
    ScramClient,
    ScramServer,
    check_password,
    make_credential,
    parse_plain,
)
from databus.storage.acls import (
    AclBinding,
    AclError,
    AclFilter,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

# RFC 7677 section 3: user "user", password "pencil"
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_client_matches_rfc_7677():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=" + CLIENT_NONCE.encode()
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(SaslError, match="not the real server"):
        client.verify(b"v=" + b"A" * 44)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_wrong_password(mechanism):
    credential = make_credential(mechanism, "s3cret")
    assert check_password(credential, "s3cret") and not check_password(credential, "s3cre")
    for password, ok in (("s3cret", True), ("wrong", False)):
        server = ScramServer(mechanism, lambda user: credential if user == "al,ice" else None)
        client = ScramClient(mechanism, "al,ice", password)  # "," travels escaped as =2C
        server_first = server.first(client.first())
        if ok:
            client.verify(server.final(client.final(server_first)))
            assert server.username == "al,ice"
        else:
            with pytest.raises(SaslError, match="invalid credentials"):
                server.final(client.final(server_first))


@pytest.mark.parametrize(("first", "final", "reason"), [
    (b"p=tls-unique,,n=u,r=x", None, "channel binding"),
    (b"n,,r=x,n=u", None, "must start with n=user"),
    (b"n,,n=u", None, "must start with n=user"),
    (b"n,,n=a=zz,r=x", None, "invalid escape"),
    (b"\xff\xfe", None, "channel binding"),
    (b"n,,n=u,r=" + b"x" * 5000, None, "too long"),
    (b"n,,n=u,r=abc", b"c=biws,r=abc,p=AAAA", "nonce mismatch"),
    (b"n,,n=u,r=abc", b"garbage", "malformed attribute"),
    (b"n,,n=u,r=abc", b"r=abc", "must be c=...,r=...,p=..."),
])
def test_scram_server_refuses_malformed_messages(first, final, reason):
    server = ScramServer("SCRAM-SHA-256", lambda user: None)
    with pytest.raises(SaslError, match=reason):
        server.first(first)
        server.final(final)
    with pytest.raises(SaslError, match="out of order"):
        server.first(b"n,,n=u,r=abc")  # one exchange per ScramServer, whatever happened


def test_plain_parsing():
    assert parse_plain(b"\0bob\0pw") == ("bob", "pw")
    assert parse_plain(b"bob\0bob\0pw") == ("bob", "pw")
    for token, reason in ((b"bob\0pw", "authzid NUL"), (b"eve\0bob\0pw", "authorization id"),
                          (b"\0\0pw", "empty"), (b"\0" + b"x" * 5000 + b"\0y", "too long")):
        with pytest.raises(SaslError, match=reason):
            parse_plain(token)


def acl(rtype, name, op, permission=Permission.ALLOW, principal="User:bob",
        pattern=PatternType.LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def test_authorizer_follows_kafkas_rules(tmp_path):
    store = AclStore(tmp_path)
    store.add([
        acl(ResourceType.TOPIC, "orders", Operation.READ),
        acl(ResourceType.TOPIC, "pay-", Operation.WRITE, pattern=PatternType.PREFIXED),
        acl(ResourceType.TOPIC, "pay-secret", Operation.ALL, Permission.DENY),
        acl(ResourceType.TOPIC, "*", Operation.DESCRIBE, principal="User:*", host="10.0.0.1"),
        acl(ResourceType.GROUP, "g", Operation.READ),
    ])
    auth = Authorizer(store, enabled=True, super_users=frozenset({"User:root"}))

    def may(op, name, principal="User:bob", host="127.0.0.1", rtype=ResourceType.TOPIC):
        return auth.authorize(principal, host, op, rtype, name)

    assert may(Operation.READ, "orders") and not may(Operation.WRITE, "orders")
    assert may(Operation.DESCRIBE, "orders")  # implied by READ
    assert may(Operation.WRITE, "pay-in") and may(Operation.DESCRIBE, "pay-in")
    assert not may(Operation.WRITE, "pay-secret")  # DENY wins over the prefixed ALLOW
    assert not may(Operation.READ, "other")  # ACLs exist for it (the "*" one): no match
    assert may(Operation.DESCRIBE, "other", principal="User:eve", host="10.0.0.1")
    assert not may(Operation.READ, "g")  # a group name is not a topic name
    assert may(Operation.READ, "g", rtype=ResourceType.GROUP)
    assert may(Operation.ALTER, "anything", principal="User:root")
    assert not may(Operation.READ, "x", rtype=ResourceType.TRANSACTIONAL_ID)  # no ACL: deny
    auth.allow_if_no_acl = True
    assert may(Operation.READ, "x", rtype=ResourceType.TRANSACTIONAL_ID)
    assert Authorizer(store, enabled=False).authorize("User:eve", "h", Operation.ALL,
                                                      ResourceType.CLUSTER, "kafka-cluster")
    # durable: a new store on the same directory reads the same ACLs
    assert AclStore(tmp_path).load().all() == store.all()
    gone = store.delete(AclFilter(ResourceType.TOPIC, "pay-secret", PatternType.ANY))
    assert [a.resource_name for a in gone] == ["pay-secret"]
    matching = AclStore(tmp_path).load().describe(
        AclFilter(ResourceType.TOPIC, "pay-in", PatternType.MATCH))
    assert {a.resource_name for a in matching} == {"pay-", "*"}


@pytest.mark.parametrize(("binding", "reason"), [
    (acl(ResourceType.ANY, "t", Operation.READ), "concrete resource type"),
    (acl(ResourceType.TOPIC, "t", Operation.ANY), "concrete operation"),
    (acl(ResourceType.TOPIC, "t", Operation.READ, pattern=PatternType.MATCH), "LITERAL or"),
    (acl(ResourceType.TOPIC, "t", Operation.READ, principal="bob"), "TYPE:NAME"),
    (acl(ResourceType.CLUSTER, "c", Operation.ALTER), "kafka-cluster"),
])
def test_bad_acls_are_refused_by_name(binding, reason):
    with pytest.raises(AclError, match=reason):
        binding.validate()


def test_listeners_and_their_protocols():
    listeners = parse_listeners(
        "PLAINTEXT://:9092,INTERNAL://10.0.0.5:9095,SASL_SSL://[::1]:9094",
        "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,SASL_SSL:SASL_SSL")
    assert [(x.name, x.protocol, x.host, x.port, x.tls, x.sasl) for x in listeners] == [
        ("PLAINTEXT", "PLAINTEXT", "", 9092, False, False),
        ("INTERNAL", "SSL", "10.0.0.5", 9095, True, False),
        ("SASL_SSL", "SASL_SSL", "::1", 9094, True, True)]
    config = BrokerConfig.from_options([
        "listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094",
        "advertised.listeners=SASL_SSL://bus.example.com:19094"])
    assert config.advertised_for("SASL_SSL") == ("bus.example.com", 19094)
    assert config.advertised_for("PLAINTEXT") is None
    for option, reason in (("listeners=A://:1", "listener A has no security protocol"),
                           ("listeners=SSL://:1,SSL://:2", "named twice"),
                           ("listener.security.protocol.map=X:TLS", "'TLS' is not one of"),
                           ("sasl.enabled.mechanisms=GSSAPI", "supported mechanisms are"),
                           ("ssl.client.auth=maybe", "ssl.client.auth")):
        with pytest.raises(BrokerConfigError, match=reason):
            BrokerConfig.from_options([option])


def test_certificate_principal_is_the_subject_in_rfc_2253_order():
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "databus"),),
                        (("commonName", "app"),))}
    assert certificate_principal(cert) == "User:CN=app,O=databus,C=DE"
    assert certificate_principal(None) is None


def test_secret_references_and_reload_diffs_hide_values(tmp_path, monkeypatch):
    from databus.config import ConfigError, parse_config, resolve_references
    from databus.sidecar.config_diff import diff_configs

    monkeypatch.setenv("PW_FROM_ENV", "env-secret")
    (tmp_path / "pw").write_text("file-secret\n")
    resolved = resolve_references({"sasl.password": "${env:PW_FROM_ENV}",
                                   "ssl.key.password": f"${{file:{tmp_path}/pw}}",
                                   "linger.ms": 5})
    assert resolved == {"sasl.password": "env-secret", "ssl.key.password": "file-secret",
                        "linger.ms": 5}
    with pytest.raises(ConfigError, match="cannot read /nonexistent/x") as failure:
        resolve_references({"sasl.password": "${file:/nonexistent/x}"})
    assert "secret" not in str(failure.value)

    def cluster(password):
        return parse_config({"clusters": {"c": {
            "bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL",
            "sasl.username": "u", "sasl.password": password}}})

    old, new = cluster("${env:PW_FROM_ENV}"), cluster("literal-secret")
    assert old.clusters["c"].connection_settings()["sasl.password"] == "env-secret"
    applied = diff_configs(old, new).applied_line()
    assert "sasl.password" in applied and "(hidden)" in applied
    assert "literal-secret" not in applied and "env-secret" not in applied


def test_spark_source_passes_kafka_security_options_to_the_client():
    from databus_spark.cluster import admin_config, consumer_config

    kafka = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "spark",
             "sasl.password": "spark-pw-9", "ssl.ca.location": "/etc/ca.crt"}
    for config in (consumer_config(kafka), admin_config(kafka)):
        assert (config.security_protocol, config.sasl_mechanism, config.sasl_username,
                config.ssl_ca_location) == ("SASL_SSL", "SCRAM-SHA-256", "spark", "/etc/ca.crt")
        assert config.sasl_password.get_secret_value() == "spark-pw-9"
        assert "spark-pw-9" not in repr(config) + str(config.to_kafka())


def test_credential_store_keeps_no_password_and_is_private(tmp_path):
    import os
    import stat

    from databus.storage.credentials import CredentialStore

    store = CredentialStore(tmp_path)
    store.upsert("alice", make_credential("SCRAM-SHA-256", "alice-pw-5"))
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert "alice-pw-5" not in store.path.read_text()
    again = CredentialStore(tmp_path).load()  # durable: another reader sees the same user
    assert again.check_plain("alice", "alice-pw-5") and not again.check_plain("alice", "x")
    assert again.delete("alice") and not again.delete("alice")
    assert store.lookup("alice", "SCRAM-SHA-256") is None  # re-read after the change
