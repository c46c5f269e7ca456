"""The registry's state is the ``_schemas`` topic: ids, versions, levels and deletions
survive a kill -9 of the broker, ids are never given twice, and a registration cut by the
kill is either whole or absent."""

from __future__ import annotations

import json
import threading

from .conftest import avro_record, call


def test_state_survives_kill9_and_a_racing_registration_is_whole_or_absent(tmp_path):
    from tests.helpers.broker import BrokerProcess

    with BrokerProcess(tmp_path, {"schema.registry.listen": "127.0.0.1:0"}) as broker:
        url = broker.schema_registry_url
        ids = [call(f"{url}/subjects/keep/versions", "POST",
                    {"schema": avro_record("K", ("a", "int"), *[(f"f{i}", "int", 0)
                                                                for i in range(n)])}).body["id"]
               for n in range(3)]
        other = call(f"{url}/subjects/other/versions", "POST",
                     {"schema": json.dumps({"type": "string"}), "schemaType": "JSON"}).body
        call(f"{url}/config/keep", "PUT", {"compatibility": "FULL"})
        call(f"{url}/subjects/keep/versions/2", "DELETE")
        before = {path: call(f"{url}{path}").raw for path in (
            "/subjects", "/subjects/keep/versions", "/subjects/keep/versions/3",
            "/subjects/keep/versions?deleted=true", f"/schemas/ids/{ids[0]}",
            f"/schemas/ids/{other['id']}", "/config/keep")}

        broker.kill9()
        broker.start()
        url = broker.schema_registry_url
        after = {path: call(f"{url}{path}").raw for path in before}
        assert after == before
        fresh = call(f"{url}/subjects/new/versions", "POST",
                     {"schema": avro_record("New", ("z", "int"))}).body
        assert fresh["id"] == max(ids + [other["id"]]) + 1
        assert "schema registry: 2 subjects" in broker.log_text()
        _registration_racing_a_kill_is_whole_or_absent(broker)


def _registration_racing_a_kill_is_whole_or_absent(broker):
    """A registration cut by a kill -9 is whole or absent (on the broker of the test above,
    to start one broker less)."""
    url = broker.schema_registry_url
    call(f"{url}/config", "PUT", {"compatibility": "NONE"})
    acknowledged: dict[int, int] = {}  # n -> id, for each registration answered 200
    stop = threading.Event()

    def register():
        n = 0
        while not stop.is_set():
            try:
                answer = call(f"{url}/subjects/race/versions", "POST",
                              {"schema": avro_record(f"R{n}", ("x", "int"))}, timeout=5)
            except OSError:
                return  # the broker is gone
            if answer.status == 200:
                acknowledged[n] = answer.body["id"]
            n += 1

    worker = threading.Thread(target=register)
    worker.start()
    try:
        while len(acknowledged) < 20:
            stop.wait(0.01)
        broker.kill9()
    finally:
        stop.set()
        worker.join(30)
    broker.start()
    url = broker.schema_registry_url
    versions = call(f"{url}/subjects/race/versions").body
    assert versions == list(range(1, len(versions) + 1))  # no hole, no half record
    assert len(versions) >= len(acknowledged)  # every acknowledged one is there
    for n, schema_id in acknowledged.items():
        got = call(f"{url}/schemas/ids/{schema_id}").body
        assert json.loads(got["schema"])["name"] == f"R{n}"
    for version in versions:
        got = call(f"{url}/subjects/race/versions/{version}").body
        assert json.loads(got["schema"])["name"] == f"R{version - 1}"
