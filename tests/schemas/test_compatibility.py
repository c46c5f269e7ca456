"""The compatibility matrix: every level x the usual schema changes, for Avro and JSON
Schema, with the answers Confluent's documentation gives ("Schema Evolution and
Compatibility": BACKWARD = the new schema reads the old data, FORWARD = the old schema
reads the new data, FULL = both; for JSON Schema the content-model rules of its JSON
Schema page: an open model may not gain a typed property backward nor lose one forward).
Asked through the REST API: PUT /config/{subject}, POST /compatibility/subjects/{subject}/
versions, and registration refused (409) exactly when the answer is no."""

from __future__ import annotations

import json

import pytest

from .conftest import avro_record, call

LEVELS = ["NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
          "FULL", "FULL_TRANSITIVE"]


def _answers(backward: bool, forward: bool) -> dict[str, bool]:
    """Per level, from the two directions (one old version: transitive = plain)."""
    return {"NONE": True, "BACKWARD": backward, "BACKWARD_TRANSITIVE": backward,
            "FORWARD": forward, "FORWARD_TRANSITIVE": forward,
            "FULL": backward and forward, "FULL_TRANSITIVE": backward and forward}


BASE_AVRO = avro_record("User", ("id", "long"), ("name", "string"))
AVRO_CASES = {
    # change: (new schema, backward, forward)
    "add field with default": (
        avro_record("User", ("id", "long"), ("name", "string"), ("email", "string", "")),
        True, True),
    "add field without default": (
        avro_record("User", ("id", "long"), ("name", "string"), ("email", "string")),
        False, True),
    "remove field": (avro_record("User", ("id", "long")), True, False),
    "change type": (avro_record("User", ("id", "long"), ("name", "int")), False, False),
    "promote type int to long": (None, True, False),  # filled below (base has no int)
    "rename field": (avro_record("User", ("id", "long"), ("full_name", "string")),
                     False, False),
}
PROMOTE_BASE = avro_record("User", ("id", "int"))
PROMOTE_NEW = avro_record("User", ("id", "long"))


def _json(properties: dict, required=(), closed: bool = False) -> str:
    schema: dict = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return json.dumps(schema)


STR, INT, NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}
BASE_JSON = _json({"id": INT, "name": STR}, ["id"])
BASE_JSON_CLOSED = _json({"id": INT, "name": STR}, ["id"], closed=True)
JSON_CASES = {
    # open content model (JSON Schema's default)
    "open: add optional property": (_json({"id": INT, "name": STR, "email": STR}, ["id"]),
                                    False, True),
    "open: add property with default": (
        _json({"id": INT, "name": STR, "email": {"type": "string", "default": ""}}, ["id"]),
        False, True),
    "open: remove property": (_json({"id": INT}, ["id"]), True, False),
    "open: change type": (_json({"id": INT, "name": INT}, ["id"]), False, False),
    "open: widen integer to number": (_json({"id": NUM, "name": STR}, ["id"]), True, False),
    "open: rename property": (_json({"id": INT, "full_name": STR}, ["id"]), False, False),
    "open: make optional property required": (_json({"id": INT, "name": STR}, ["id", "name"]),
                                              False, True),
}
JSON_CLOSED_CASES = {
    "closed: add optional property": (
        _json({"id": INT, "name": STR, "email": STR}, ["id"], closed=True), True, False),
    "closed: add required property": (
        _json({"id": INT, "name": STR, "email": STR}, ["id", "email"], closed=True), False, False),
    "closed: remove property": (_json({"id": INT}, ["id"], closed=True), False, True),
    "closed: rename property": (_json({"id": INT, "full_name": STR}, ["id"], closed=True),
                                False, False),
}


def _matrix():
    for change, (new, backward, forward) in AVRO_CASES.items():
        base = BASE_AVRO
        if new is None:
            base, new = PROMOTE_BASE, PROMOTE_NEW
        yield "AVRO", change, base, new, _answers(backward, forward)
    for change, (new, backward, forward) in JSON_CASES.items():
        yield "JSON", change, BASE_JSON, new, _answers(backward, forward)
    for change, (new, backward, forward) in JSON_CLOSED_CASES.items():
        yield "JSON", change, BASE_JSON_CLOSED, new, _answers(backward, forward)


CASES = list(_matrix())


@pytest.mark.parametrize("schema_type,change,base,new,answers", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_matrix(registry, schema_type, change, base, new, answers):
    url = registry.schema_registry_url
    subject = f"matrix-{schema_type}-{change}".replace(" ", "-").replace(":", "")
    call(f"{url}/config/{subject}", "PUT", {"compatibility": "NONE"})
    first = call(f"{url}/subjects/{subject}/versions", "POST",
                 {"schema": base, "schemaType": schema_type})
    assert first.status == 200, first
    got = {}
    for level in LEVELS:
        call(f"{url}/config/{subject}", "PUT", {"compatibility": level})
        answer = call(f"{url}/compatibility/subjects/{subject}/versions/latest", "POST",
                      {"schema": new, "schemaType": schema_type})
        assert answer.status == 200, answer
        got[level] = answer.body["is_compatible"]
    assert got == answers
    # registration agrees with the check: refused with 409 exactly when incompatible
    level = next(level for level in LEVELS[1:] if not answers[level]) \
        if not all(answers.values()) else "FULL"
    call(f"{url}/config/{subject}", "PUT", {"compatibility": level})
    registered = call(f"{url}/subjects/{subject}/versions", "POST",
                      {"schema": new, "schemaType": schema_type})
    assert registered.status == (200 if answers[level] else 409), registered


TRANSITIVE_HISTORY = [
    avro_record("T", ("id", "long")),
    avro_record("T", ("id", "long"), ("note", "string", "")),
]
# Reads v2's data (which has note) but not v1's (no note, and no default here).
TRANSITIVE_NEW = avro_record("T", ("id", "long"), ("note", "string"))


@pytest.mark.parametrize("level,expected", [
    ("BACKWARD", True), ("BACKWARD_TRANSITIVE", False), ("FULL", True),
    ("FULL_TRANSITIVE", False), ("FORWARD", True), ("FORWARD_TRANSITIVE", True),
])
def test_transitive_levels_check_every_version(registry, level, expected):
    url = registry.schema_registry_url
    subject = f"transitive-{level}"
    for schema in TRANSITIVE_HISTORY:
        assert call(f"{url}/subjects/{subject}/versions", "POST",
                    {"schema": schema}).status == 200
    call(f"{url}/config/{subject}", "PUT", {"compatibility": level})
    answer = call(f"{url}/compatibility/subjects/{subject}/versions", "POST",
                  {"schema": TRANSITIVE_NEW})
    assert answer.body["is_compatible"] is expected
    registered = call(f"{url}/subjects/{subject}/versions", "POST", {"schema": TRANSITIVE_NEW})
    assert registered.status == (200 if expected else 409)



def _proto(body: str, package: str = "shop") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


BASE_PROTO = _proto("message Order {\n  int64 id = 1;\n  string item = 2;\n}")
# Confluent's Protobuf rules: fields are matched by number (backward = forward here).
PROTO_CASES = {
    "add field": (_proto("message Order { int64 id = 1; string item = 2; int32 qty = 3; }"),
                  True),
    "remove field": (_proto("message Order { int64 id = 1; }"), True),
    "rename field": (_proto("message Order { int64 id = 1; string name = 2; }"), True),
    "widen int32-group scalar": (_proto("message Order { uint64 id = 1; string item = 2; }"),
                                 True),
    "string to bytes": (_proto("message Order { int64 id = 1; bytes item = 2; }"), True),
    "change type": (_proto("message Order { string id = 1; string item = 2; }"), False),
    "remove message": (_proto("message Other { int64 id = 1; }"), False),
    "change package": (_proto("message Order { int64 id = 1; string item = 2; }", "store"),
                       False),
}


@pytest.mark.parametrize("change", list(PROTO_CASES))
def test_protobuf_cases(registry, change):
    url = registry.schema_registry_url
    new, compatible = PROTO_CASES[change]
    subject = f"proto-{change}".replace(" ", "-")
    assert call(f"{url}/subjects/{subject}/versions", "POST",
                {"schema": BASE_PROTO, "schemaType": "PROTOBUF"}).status == 200
    for level in ("BACKWARD", "FORWARD", "FULL_TRANSITIVE"):
        call(f"{url}/config/{subject}", "PUT", {"compatibility": level})
        answer = call(f"{url}/compatibility/subjects/{subject}/versions/latest", "POST",
                      {"schema": new, "schemaType": "PROTOBUF"})
        assert answer.body == {"is_compatible": compatible}, (level, answer)
    registered = call(f"{url}/subjects/{subject}/versions", "POST",
                      {"schema": new, "schemaType": "PROTOBUF"})
    assert registered.status == (200 if compatible else 409), registered
