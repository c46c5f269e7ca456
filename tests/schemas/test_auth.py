"""With a SASL listener (security on), the registry takes the broker's SASL users' logins as
HTTP basic authentication: confluent-kafka's client with ``basic.auth.user.info`` works, no
or a wrong login gets Confluent's 401."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from databus.protocol.sasl import make_credential
from databus.storage.credentials import CredentialStore

from .conftest import avro_record


@pytest.fixture(scope="module")
def secured_registry(tmp_path_factory):
    from tests.helpers.broker import BrokerProcess

    root = tmp_path_factory.mktemp("secured-registry")
    (root / "data").mkdir()
    store = CredentialStore(root / "data").load()
    store.upsert("alice", make_credential("SCRAM-SHA-256", "alice-secret"))
    with BrokerProcess(root, {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
            "schema.registry.listen": "127.0.0.1:0"}) as broker:
        yield broker


def _get(url: str, login: str | None):
    headers = {}
    if login is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=30) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


def test_logins(secured_registry):
    url = secured_registry.schema_registry_url
    for login in (None, "alice:wrong", "mallory:alice-secret", "not base64 at all"):
        status, body, headers = _get(f"{url}/subjects", login)
        assert (status, body) == (401, {"error_code": 40101, "message": "Unauthorized"}), login
        assert headers["WWW-Authenticate"].startswith("Basic")
    assert _get(f"{url}/subjects", "alice:alice-secret")[:2] == (200, [])
    assert "HTTP basic: the broker's SASL users" in secured_registry.log_text()


def test_confluent_client_with_basic_auth(secured_registry):
    pytest.importorskip("confluent_kafka.schema_registry")
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    url = secured_registry.schema_registry_url
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
    schema_id = client.register_schema("auth-value", Schema(avro_record("A", ("a", "int")),
                                                            "AVRO"))
    assert client.get_latest_version("auth-value").schema_id == schema_id
    stranger = SchemaRegistryClient({"url": url})
    with pytest.raises(SchemaRegistryError) as error:
        stranger.get_subjects()
    assert error.value.http_status_code == 401 and error.value.error_code == 40101
