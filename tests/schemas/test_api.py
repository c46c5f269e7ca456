"""Confluent's REST API v1 as served by ``databus broker``: each endpoint's answer and
error, through plain HTTP (bodies and codes as Confluent's API reference gives them)."""

from __future__ import annotations

import json

from .conftest import CONTENT_TYPE, avro_record, call

V1 = avro_record("Order", ("id", "long"))
V2 = avro_record("Order", ("id", "long"), ("note", "string", ""))


def test_register_get_and_list(registry):
    url = registry.schema_registry_url
    first = call(f"{url}/subjects/api-orders-value/versions", "POST", {"schema": V1})
    assert first.status == 200 and first.content_type == CONTENT_TYPE
    again = call(f"{url}/subjects/api-orders-value/versions", "POST",
                 {"schema": json.dumps(json.loads(V1), indent=4)})
    assert again.body == first.body  # same schema, other spelling: same id, no new version
    second = call(f"{url}/subjects/api-orders-value/versions", "POST", {"schema": V2})
    assert second.body["id"] != first.body["id"]
    assert call(f"{url}/subjects/api-orders-value/versions").body == [1, 2]
    assert "api-orders-value" in call(f"{url}/subjects").body
    latest = call(f"{url}/subjects/api-orders-value/versions/latest").body
    assert latest["version"] == 2 and latest["id"] == second.body["id"]
    assert latest["subject"] == "api-orders-value" and "schemaType" not in latest
    assert json.loads(latest["schema"]) == json.loads(V2)
    assert call(f"{url}/subjects/api-orders-value/versions/1").body["id"] == first.body["id"]
    assert call(f"{url}/subjects/api-orders-value/versions/-1").body["version"] == 2
    raw = call(f"{url}/subjects/api-orders-value/versions/1/schema")
    assert json.loads(raw.raw) == json.loads(V1)
    by_id = call(f"{url}/schemas/ids/{first.body['id']}").body
    assert json.loads(by_id["schema"]) == json.loads(V1)
    assert json.loads(call(f"{url}/schemas/ids/{first.body['id']}/schema").raw) == \
        json.loads(V1)
    assert call(f"{url}/schemas/ids/{first.body['id']}/versions").body == [
        {"subject": "api-orders-value", "version": 1}]


def test_same_schema_other_subject_keeps_its_id(registry):
    url = registry.schema_registry_url
    schema = avro_record("Shared", ("x", "int"))
    a = call(f"{url}/subjects/api-shared-a/versions", "POST", {"schema": schema}).body
    b = call(f"{url}/subjects/api-shared-b/versions", "POST", {"schema": schema}).body
    assert a == b
    assert call(f"{url}/schemas/ids/{a['id']}/subjects").body == ["api-shared-a",
                                                                   "api-shared-b"]


def test_lookup(registry):
    url = registry.schema_registry_url
    schema = avro_record("Lookup", ("x", "int"))
    registered = call(f"{url}/subjects/api-lookup/versions", "POST", {"schema": schema}).body
    found = call(f"{url}/subjects/api-lookup", "POST", {"schema": schema})
    assert found.status == 200
    assert found.body["id"] == registered["id"] and found.body["version"] == 1
    other = call(f"{url}/subjects/api-lookup", "POST",
                 {"schema": avro_record("Lookup", ("y", "int"))})
    assert (other.status, other.body["error_code"]) == (404, 40403)
    missing = call(f"{url}/subjects/api-nobody", "POST", {"schema": schema})
    assert (missing.status, missing.body["error_code"]) == (404, 40401)


def test_not_found_errors(registry):
    url = registry.schema_registry_url
    call(f"{url}/subjects/api-nf/versions", "POST", {"schema": V1})
    cases = {
        f"{url}/subjects/api-absent/versions": (404, 40401),
        f"{url}/subjects/api-nf/versions/7": (404, 40402),
        f"{url}/subjects/api-nf/versions/0": (422, 42202),
        f"{url}/subjects/api-nf/versions/first": (422, 42202),
        f"{url}/schemas/ids/99999": (404, 40403),
        f"{url}/config/api-nf": (404, 40408),
        f"{url}/no/such/path": (404, 404),
    }
    for path, (status, code) in cases.items():
        answer = call(path)
        assert (answer.status, answer.body["error_code"]) == (status, code), path
        assert answer.content_type == CONTENT_TYPE
        assert answer.body["message"]


def test_incompatible_is_409_with_details(registry):
    url = registry.schema_registry_url
    call(f"{url}/subjects/api-inc/versions", "POST", {"schema": V1})
    answer = call(f"{url}/subjects/api-inc/versions", "POST",
                  {"schema": avro_record("Order", ("id", "string"))})
    assert answer.status == 409 and answer.body["error_code"] == 409
    message = answer.body["message"]
    assert message.startswith("Schema being registered is incompatible with an earlier "
                              "schema for subject \"api-inc\"")
    assert "TYPE_MISMATCH" in message and "{compatibility: 'BACKWARD'}" in message
    assert call(f"{url}/subjects/api-inc/versions").body == [1]  # nothing registered


def test_compatibility_endpoint(registry):
    url = registry.schema_registry_url
    call(f"{url}/subjects/api-compat/versions", "POST", {"schema": V1})
    ok = call(f"{url}/compatibility/subjects/api-compat/versions/latest", "POST",
              {"schema": V2})
    assert ok.body == {"is_compatible": True}
    bad = call(f"{url}/compatibility/subjects/api-compat/versions/1?verbose=true", "POST",
               {"schema": avro_record("Order", ("id", "long"), ("must", "string"))})
    assert bad.body["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in bad.body["messages"])


def test_config_levels(registry):
    url = registry.schema_registry_url
    assert call(f"{url}/config").body == {"compatibilityLevel": "BACKWARD"}
    put = call(f"{url}/config/api-cfg", "PUT", {"compatibility": "full_transitive"})
    assert put.body == {"compatibility": "FULL_TRANSITIVE"}
    assert call(f"{url}/config/api-cfg").body == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert call(f"{url}/config").body == {"compatibilityLevel": "BACKWARD"}
    bad = call(f"{url}/config/api-cfg", "PUT", {"compatibility": "SIDEWAYS"})
    assert (bad.status, bad.body["error_code"]) == (422, 42203)
    assert call(f"{url}/config/api-cfg", "DELETE").body == {
        "compatibilityLevel": "FULL_TRANSITIVE"}
    assert call(f"{url}/config/api-cfg?defaultToGlobal=true").body == {
        "compatibilityLevel": "BACKWARD"}


def test_modes(registry):
    url = registry.schema_registry_url
    assert call(f"{url}/mode").body == {"mode": "READWRITE"}
    assert call(f"{url}/mode/api-ro", "PUT", {"mode": "READONLY"}).body == {"mode": "READONLY"}
    refused = call(f"{url}/subjects/api-ro/versions", "POST", {"schema": V1})
    assert (refused.status, refused.body["error_code"]) == (422, 42205)
    bad = call(f"{url}/mode/api-ro", "PUT", {"mode": "WRITEONLY"})
    assert (bad.status, bad.body["error_code"]) == (422, 42204)
    assert call(f"{url}/mode/api-ro", "DELETE").body == {"mode": "READONLY"}
    assert call(f"{url}/subjects/api-ro/versions", "POST", {"schema": V1}).status == 200


def test_import_mode_keeps_given_ids(registry):
    url = registry.schema_registry_url
    assert call(f"{url}/mode/api-imp", "PUT", {"mode": "IMPORT"}).status == 200
    schema = avro_record("Imported", ("x", "int"))
    answer = call(f"{url}/subjects/api-imp/versions", "POST",
                  {"schema": schema, "id": 5000, "version": 3})
    assert answer.body == {"id": 5000}
    assert call(f"{url}/subjects/api-imp/versions/3").body["id"] == 5000
    call(f"{url}/mode/api-imp", "DELETE")
    later = call(f"{url}/subjects/api-later/versions", "POST",
                 {"schema": avro_record("Later", ("y", "int"))}).body
    assert later["id"] > 5000  # ids go on after the largest, never reuse


def test_soft_and_permanent_deletes(registry):
    url = registry.schema_registry_url
    s = f"{url}/subjects/api-del"
    one = call(f"{s}/versions", "POST", {"schema": V1}).body
    call(f"{s}/versions", "POST", {"schema": V2})
    early = call(f"{s}/versions/1?permanent=true", "DELETE")
    assert (early.status, early.body["error_code"]) == (404, 40407)
    assert call(f"{s}/versions/1", "DELETE").body == 1
    again = call(f"{s}/versions/1", "DELETE")
    assert (again.status, again.body["error_code"]) == (404, 40406)
    assert call(f"{s}/versions").body == [2]
    assert call(f"{s}/versions?deleted=true").body == [1, 2]
    assert call(f"{s}/versions/1?deleted=true").body["id"] == one["id"]
    assert call(f"{url}/schemas/ids/{one['id']}").status == 200  # soft: still readable by id
    assert call(f"{s}/versions/1?permanent=true", "DELETE").body == 1
    assert call(f"{s}/versions?deleted=true").body == [2]
    assert call(s, "DELETE").body == [2]
    assert "api-del" not in call(f"{url}/subjects").body
    assert "api-del" in call(f"{url}/subjects?deleted=true").body
    twice = call(s, "DELETE")
    assert (twice.status, twice.body["error_code"]) == (404, 40404)
    assert call(f"{s}?permanent=true", "DELETE").body == [2]
    gone = call(f"{s}/versions?deleted=true")
    assert (gone.status, gone.body["error_code"]) == (404, 40401)
    # registered again, the subject starts over; the id of the same schema is kept
    assert call(f"{s}/versions", "POST", {"schema": V1}).body == one


def test_references(registry):
    url = registry.schema_registry_url
    address = json.dumps({"type": "record", "name": "Address", "namespace": "com.shop",
                          "fields": [{"name": "city", "type": "string"}]})
    call(f"{url}/subjects/api-address/versions", "POST", {"schema": address})
    customer = json.dumps({"type": "record", "name": "Customer", "namespace": "com.shop",
                           "fields": [{"name": "address", "type": "com.shop.Address"}]})
    unresolved = call(f"{url}/subjects/api-customer/versions", "POST", {"schema": customer})
    assert (unresolved.status, unresolved.body["error_code"]) == (422, 42201)
    refs = [{"name": "com.shop.Address", "subject": "api-address", "version": 1}]
    answer = call(f"{url}/subjects/api-customer/versions", "POST",
                  {"schema": customer, "references": refs})
    assert answer.status == 200
    got = call(f"{url}/subjects/api-customer/versions/1").body
    assert got["references"] == refs
    assert call(f"{url}/subjects/api-address/versions/1/referencedby").body == [
        answer.body["id"]]
    held = call(f"{url}/subjects/api-address/versions/1", "DELETE")
    assert (held.status, held.body["error_code"]) == (422, 42206)


def test_json_schema_type(registry):
    url = registry.schema_registry_url
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    answer = call(f"{url}/subjects/api-json/versions", "POST",
                  {"schema": schema, "schemaType": "JSON"})
    assert answer.status == 200
    got = call(f"{url}/subjects/api-json/versions/latest").body
    assert got["schemaType"] == "JSON" and json.loads(got["schema"]) == json.loads(schema)
    assert call(f"{url}/schemas/ids/{answer.body['id']}").body["schemaType"] == "JSON"
    assert sorted(call(f"{url}/schemas/types").body) == ["AVRO", "JSON", "PROTOBUF"]


def test_normalize(registry):
    url = registry.schema_registry_url
    a = json.dumps({"type": "object", "properties": {"a": {"type": "string"}},
                    "required": ["a"]})
    b = json.dumps({"required": ["a"], "properties": {"a": {"type": "string"}},
                    "type": "object"})
    first = call(f"{url}/subjects/api-norm/versions?normalize=true", "POST",
                 {"schema": a, "schemaType": "JSON"}).body
    second = call(f"{url}/subjects/api-norm/versions?normalize=true", "POST",
                  {"schema": b, "schemaType": "JSON"}).body
    assert first == second
    assert call(f"{url}/subjects/api-norm/versions").body == [1]
