from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="package")
def registry(tmp_path_factory):
    """A ``databus broker`` process serving the schema registry, shared by the modules here
    (on one test worker; each test uses subject names of its own)."""
    from tests.helpers.broker import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("registry"),
                       {"schema.registry.listen": "127.0.0.1:0"}) as running:
        yield running


class Answer:
    def __init__(self, status: int, content_type: str, raw: bytes) -> None:
        self.status = status
        self.content_type = content_type
        self.raw = raw

    @property
    def body(self):
        return json.loads(self.raw)

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.raw[:300]!r})"


def call(url: str, method: str = "GET", body=None, *, raw: bytes | None = None,
         timeout: float = 30) -> Answer:
    """One HTTP request, its status, content type and body (errors too)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.headers.get("Content-Type", ""),
                          response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers.get("Content-Type", ""), error.read())


def avro_record(name: str, *fields) -> str:
    """An Avro record schema: fields as (name, type) or (name, type, default)."""
    out = []
    for field in fields:
        spec = {"name": field[0], "type": field[1]}
        if len(field) > 2:
            spec["default"] = field[2]
        out.append(spec)
    return json.dumps({"type": "record", "name": name, "fields": out})
