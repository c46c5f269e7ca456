"""``databus schemas`` as a user runs it, against a broker serving the registry."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import avro_record


def databus(*args, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "databus.cli", "schemas", *args],
                          capture_output=True, text=True, input=stdin, timeout=60)


def test_register_list_get_check_delete(registry, tmp_path):
    url = registry.schema_registry_url
    v1 = tmp_path / "user.avsc"
    v1.write_text(avro_record("CliUser", ("id", "long")))
    bad = tmp_path / "user-bad.avsc"
    bad.write_text(avro_record("CliUser", ("id", "string")))

    done = databus("--registry", url, "register", "cli-user", str(v1))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cli-user: version 1, id ")
    listed = json.loads(databus("--registry", url, "list", "--prefix", "cli-", "--json").stdout)
    assert [(r["subject"], r["version"], r["schemaType"]) for r in listed] == [
        ("cli-user", 1, "AVRO")]
    got = json.loads(databus("--registry", url, "get", "cli-user", "--json").stdout)
    assert json.loads(got["schema"]) == json.loads(v1.read_text())

    check = databus("--registry", url, "check", "cli-user", str(bad))
    assert check.returncode == 1 and check.stdout.startswith("incompatible")
    assert "TYPE_MISMATCH" in check.stdout
    refused = databus("--registry", url, "register", "cli-user", str(bad))
    assert refused.returncode == 1 and "409 Schema being registered is incompatible" in \
        refused.stderr

    json_schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    piped = databus("--registry", url, "register", "cli-json", "-", "--json", stdin=json_schema)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(databus("--registry", url, "get", "cli-json", "--json")
                      .stdout)["schemaType"] == "JSON"  # guessed from the document

    assert databus("--registry", url, "config", "cli-user", "--set", "FULL").stdout.strip() \
        == "cli-user: FULL"
    assert databus("--registry", url, "config", "cli-user").stdout.strip() == "cli-user: FULL"
    deleted = databus("--registry", url, "delete", "cli-user")
    assert deleted.returncode == 0 and deleted.stdout.startswith("cli-user: versions 1 deleted")
    missing = databus("--registry", url, "get", "cli-user")
    assert missing.returncode == 1 and "40401" in missing.stderr


def test_registry_from_the_config_file(registry, tmp_path):
    host_port = registry.schema_registry_url.split("//", 1)[1]
    config = tmp_path / "sidecar.yaml"
    config.write_text(f"broker:\n  options:\n    schema.registry.listen: {host_port}\n")
    listed = databus("-c", str(config), "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), list)
    unreachable = databus("--registry", "http://127.0.0.1:1", "list")
    assert unreachable.returncode == 1
    assert "cannot reach the schema registry at http://127.0.0.1:1" in unreachable.stderr
