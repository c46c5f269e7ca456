"""The console's schema registry pages (docs/console.md): subjects with their latest version,
a subject's versions, one version's schema and its diff from the one before, read through
the registry's REST API (databus/schemas/client.py: ours or any Confluent-compatible one).

The registry is ``--schema-registry URL``, else the broker section's
``schema.registry.listen`` of the console's sidecar.yaml, else http://127.0.0.1:8081.
Blocking HTTP, run in a worker thread by the pages.
"""

from __future__ import annotations

import difflib
import json
import urllib.parse

from databus.schemas.client import RegistryClient, RegistryRefused, RegistryUnavailable

DEFAULT_REGISTRY = "http://127.0.0.1:8081"
MAX_SUBJECTS = 500  # a page lists at most this many (each asks for its latest version)


class SchemaPageError(Exception):
    """What the page shows instead (the registry's code and message, or why it is down)."""


def pretty(schema_type: str, text: str) -> str:
    """The schema as people read it: JSON (Avro, JSON Schema) indented; .proto as is."""
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(text), indent=2)
        except ValueError:
            pass
    return text


def diff(old: str, new: str, old_name: str, new_name: str) -> list[tuple[str, str]]:
    """(kind, line) of a unified diff of two schema texts: kind ``add``, ``del``, ``hunk``
    or ``same``."""
    out = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name,
                                     lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        kind = ("hunk" if line.startswith("@@") else "add" if line.startswith("+")
                else "del" if line.startswith("-") else "same")
        out.append((kind, line))
    return out


class SchemaPages:
    def __init__(self, url: str | None) -> None:
        self.url = url or DEFAULT_REGISTRY
        self.client = RegistryClient(self.url)

    def _call(self, path: str):
        try:
            return self.client.call(path)
        except RegistryRefused as exc:
            raise SchemaPageError(f"schema registry {self.url}: {exc}") from None
        except RegistryUnavailable as exc:
            raise SchemaPageError(str(exc)) from None

    @staticmethod
    def _quoted(subject: str) -> str:
        return urllib.parse.quote(subject, safe="")

    def subjects(self) -> dict:
        names = sorted(self._call("/subjects"))
        rows = []
        for subject in names[:MAX_SUBJECTS]:
            latest = self._call(f"/subjects/{self._quoted(subject)}/versions/latest")
            rows.append({"subject": subject, "version": latest.get("version"),
                         "id": latest.get("id"),
                         "type": latest.get("schemaType") or "AVRO"})
        return {"rows": rows, "total": len(names), "url": self.url}

    def subject(self, subject: str, version: str | None) -> dict:
        quoted = self._quoted(subject)
        versions = self._call(f"/subjects/{quoted}/versions")
        if not versions:
            raise SchemaPageError(f"subject {subject!r} has no versions")
        chosen = int(version) if version and version.isdigit() else versions[-1]
        doc = self._call(f"/subjects/{quoted}/versions/{chosen}")
        schema_type = doc.get("schemaType") or "AVRO"
        text = pretty(schema_type, doc["schema"])
        earlier = [v for v in versions if v < chosen]
        changes = None
        if earlier:
            before = self._call(f"/subjects/{quoted}/versions/{earlier[-1]}")
            changes = diff(pretty(before.get("schemaType") or "AVRO", before["schema"]), text,
                           f"version {earlier[-1]}", f"version {chosen}")
        try:
            level = self._call(f"/config/{quoted}?defaultToGlobal=true").get(
                "compatibilityLevel")
        except SchemaPageError:
            level = None
        return {"subject": subject, "versions": versions, "version": chosen, "id": doc["id"],
                "type": schema_type, "schema": text, "references": doc.get("references") or [],
                "previous": earlier[-1] if earlier else None, "diff": changes,
                "compatibility": level, "url": self.url}
