"""The console's Schemas pages over HTTP, as a browser gets them: ``databus console`` with
``--schema-registry`` pointing at a ``databus broker`` serving the registry."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.console.conftest import ConsoleProcess
from tests.helpers.broker import BrokerProcess
from tests.schemas.conftest import avro_record, call


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_subjects_versions_schema_and_diff(tmp_path):
    with BrokerProcess(tmp_path / "broker", {"schema.registry.listen": "127.0.0.1:0"}) as broker:
        registry = broker.schema_registry_url
        v1 = avro_record("Order", ("id", "long"))
        v2 = avro_record("Order", ("id", "long"), ("coupon", ["null", "string"], None))
        for subject, schema in (("orders-value", v1), ("orders-value", v2),
                                ("clicks-value", avro_record("Click", ("at", "long")))):
            assert call(f"{registry}/subjects/{subject}/versions", "POST",
                        {"schema": schema}).status == 200
        console = ConsoleProcess(tmp_path, "--bootstrap", broker.bootstrap,
                                 "--schema-registry", registry).wait()
        try:
            status, listing = _get(f"{console.url}/schemas")
            assert status == 200, listing
            assert listing.index("clicks-value") < listing.index("orders-value")
            assert ('<a href="/schemas/orders-value">orders-value</a></td>'
                    '<td class="n">2</td>') in listing
            status, latest = _get(f"{console.url}/schemas/orders-value")
            assert status == 200, latest
            assert "<h2>Version 2 (id" in latest and "compatibility BACKWARD" in latest
            assert '<span class="diff-add">+' in latest and "coupon" in latest
            assert "Changes from version 1" in latest
            status, first = _get(f"{console.url}/schemas/orders-value?version=1")
            assert status == 200 and "<h2>Version 1 (id" in first
            assert "Changes from version" not in first and "coupon" not in first
            status, missing = _get(f"{console.url}/schemas/nothing-value")
            assert status == 404 and "40401" in missing
        finally:
            console.close()
    # the schema is shown indented (its quotes escaped in the HTML)
    line = json.dumps(json.loads(v1), indent=2).splitlines()[1]
    assert line.replace('"', "&#34;") in first
