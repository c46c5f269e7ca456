"""A small blocking client of Confluent's Schema Registry REST API (ours or any other): what
the parts that read or write schemas ask — a subject's latest version, a schema by id, a
registration.  Callers on trio run it in a worker thread."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryUnavailable(Exception):
    """The registry did not answer (down, unreachable, not a registry)."""


class RegistryRefused(Exception):
    """The registry answered with an error: ``status``, Confluent's ``error_code``."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(f"HTTP {status} error {error_code}: {message}")
        self.status = status
        self.error_code = error_code


class RegistryClient:
    def __init__(self, url: str, basic_auth: str | None = None, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if basic_auth:
            token = base64.b64encode(basic_auth.encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"

    def call(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers,
                                         method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                answer = json.loads(error.read())
            except ValueError:
                answer = {}
            if not isinstance(answer, dict):
                answer = {}
            raise RegistryRefused(error.code, int(answer.get("error_code") or error.code),
                                  str(answer.get("message") or error.reason)) from None
        except (OSError, ValueError) as exc:
            raise RegistryUnavailable(f"schema registry {self.url}: {exc}") from None

    @staticmethod
    def _subject(subject: str) -> str:
        return urllib.parse.quote(subject, safe="")

    def latest(self, subject: str) -> dict:
        """{subject, version, id, schema, schemaType?, references?} of the latest version."""
        return self.call(f"/subjects/{self._subject(subject)}/versions/latest")

    def schema(self, schema_id: int) -> dict:
        """{schema, schemaType?, references?} of an id."""
        return self.call(f"/schemas/ids/{int(schema_id)}")

    def register(self, subject: str, schema_type: str, text: str) -> int:
        """The id of ``text`` under ``subject``, registering it if it is new there."""
        answer = self.call(f"/subjects/{self._subject(subject)}/versions",
                           {"schema": text, "schemaType": schema_type})
        return int(answer["id"])


def guess_type(text: str, filename: str = "") -> str:
    """A schema file's type when none is given: PROTOBUF for .proto text, JSON for a
    document that looks like a JSON Schema (``$schema``, or an object type with
    properties), AVRO otherwise (Avro schemas are JSON too).  ``databus schemas register``
    and typed streams' ``file:`` follow it."""
    if filename.endswith(".proto"):
        return "PROTOBUF"
    try:
        obj = json.loads(text)
    except ValueError:
        return "PROTOBUF" if "message " in text or "syntax" in text else "AVRO"
    if isinstance(obj, dict) and ("$schema" in obj or "properties" in obj
                                  or obj.get("type") == "object"):
        return "JSON"
    return "AVRO"
