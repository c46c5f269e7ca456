"""Bad input gets Confluent's error body and the registry goes on serving: a malformed
schema, an unknown type, a schema too large, a body that is not JSON, a wrong field type,
thousands of subjects."""

from __future__ import annotations

import json

import pytest

from .conftest import CONTENT_TYPE, avro_record, call


def _still_serving(url: str) -> None:
    assert call(f"{url}/subjects/bad-alive/versions", "POST",
                {"schema": avro_record("Alive", ("a", "int"))}).status == 200
    assert call(f"{url}/subjects/bad-alive/versions/latest").status == 200


@pytest.mark.parametrize("body,status,code,words", [
    ({"schema": '{"type": "record", "name": "X", "fields": [}'}, 422, 42201, "not JSON"),
    ({"schema": '{"type": "strin"}'}, 422, 42201, "strin"),
    ({"schema": '{"type": "record", "name": "X"}'}, 422, 42201, "Invalid schema"),
    ({"schema": json.dumps({"type": "enum", "name": "E", "symbols": ["A", "A"]})}, 422, 42201,
     "Invalid schema"),
    ({"schema": json.dumps({"type": "objekt"}), "schemaType": "JSON"}, 422, 42201, "objekt"),
    ({"schema": "[1, 2]", "schemaType": "JSON"}, 422, 42201, "object or a boolean"),
    ({"schema": ""}, 422, 42201, "Empty schema"),
    ({"schema": 42}, 422, 42201, "Invalid schema"),
    ({}, 422, 42201, "Empty schema"),
    ({"schema": '"string"', "schemaType": "XML"}, 422, 422, "Invalid schema type XML"),
    ({"schema": "message X { int32 a = ; }", "schemaType": "PROTOBUF"}, 422, 42201,
     "missing INT_LITERAL"),
    ({"schema": '"string"', "references": [{"name": "x"}]}, 422, 422, "reference"),
])
def test_bad_schemas(registry, body, status, code, words):
    url = registry.schema_registry_url
    answer = call(f"{url}/subjects/bad-subject/versions", "POST", body)
    assert (answer.status, answer.body["error_code"]) == (status, code)
    assert words in answer.body["message"]
    assert answer.content_type == CONTENT_TYPE
    _still_serving(url)


def test_body_not_json(registry):
    url = registry.schema_registry_url
    for path, method in (("/subjects/bad-raw/versions", "POST"), ("/config", "PUT"),
                         ("/compatibility/subjects/bad-raw/versions/latest", "POST")):
        answer = call(f"{url}{path}", method, raw=b"{not json")
        assert (answer.status, answer.body["error_code"]) == (400, 400), path
        assert "not JSON" in answer.body["message"]
    _still_serving(url)


def test_ten_megabyte_schema_is_refused(registry):
    url = registry.schema_registry_url
    fields = [{"name": f"f{i}_" + "x" * 100, "type": "string"} for i in range(100_000)]
    schema = json.dumps({"type": "record", "name": "Huge", "fields": fields})
    assert len(schema) > 10_000_000
    answer = call(f"{url}/subjects/bad-huge/versions", "POST", {"schema": schema})
    assert (answer.status, answer.body["error_code"]) == (413, 413)
    assert "larger than" in answer.body["message"]
    assert call(f"{url}/subjects/bad-huge/versions").status == 404
    _still_serving(url)


def test_deeply_nested_schema(registry):
    url = registry.schema_registry_url
    depth = 5000
    schema = '{"type":"array","items":' * depth + '"string"' + "}" * depth
    answer = call(f"{url}/subjects/bad-deep/versions", "POST", {"schema": schema})
    assert answer.status in (200, 422), answer
    if answer.status == 422:
        assert answer.body["error_code"] == 42201
    _still_serving(url)


def test_many_subjects(registry):
    url = registry.schema_registry_url
    schema = avro_record("Many", ("a", "int"))
    count = 300  # each registration is fsynced: kept small for the suite's time
    ids = {call(f"{url}/subjects/many-{i:05d}/versions", "POST", {"schema": schema}).body["id"]
           for i in range(count)}
    assert len(ids) == 1  # one schema, one id, in every subject
    listed = [s for s in call(f"{url}/subjects?subjectPrefix=many-").body]
    assert listed == [f"many-{i:05d}" for i in range(count)]
    _still_serving(url)


def test_http_the_server_itself_handles(registry):
    """The registry's own HTTP/1.1 server (h11_server.py): keep-alive answers on one
    connection, ``Expect: 100-continue``, and a request that is not HTTP gets a 400 in
    Confluent's format while the registry goes on serving."""
    import http.client
    import socket

    url = registry.schema_registry_url
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    schema_id = call(f"{url}/subjects/bad-http/versions", "POST",
                     {"schema": avro_record("Http", ("a", "int"))}).body["id"]
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        for path in (f"/schemas/ids/{schema_id}", "/subjects/bad-http/versions",
                     f"/schemas/ids/{schema_id}?subject=bad-http", "/schemas/ids/999999"):
            conn.request("GET", path)
            response = conn.getresponse()
            body = json.loads(response.read())
            if path.endswith("999999"):
                assert (response.status, body["error_code"]) == (404, 40403)
            else:
                assert response.status == 200, (path, body)
        conn.request("POST", "/subjects/bad-http", json.dumps(
            {"schema": avro_record("Http", ("a", "int"))}),
            {"Expect": "100-continue", "Content-Type": CONTENT_TYPE})
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["id"]) == (200, schema_id)
    finally:
        conn.close()
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = b""
        while chunk := raw.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error_code"] == 400
    _still_serving(url)
