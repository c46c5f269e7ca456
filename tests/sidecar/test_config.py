"""sidecar.yaml validation: the repository's file, precise errors, flags, generated docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from databus.config import (
    DEFAULT_SOCKET,
    EMBEDDED_CLUSTER,
    ConfigError,
    default_socket_path,
    load_config,
    parse_config,
    with_overrides,
)
from databus.tools import gen_config_docs

REPO = Path(__file__).resolve().parents[2]


def test_the_repository_sidecar_yaml_works_out_of_the_box():
    config = load_config(REPO / "sidecar.yaml")
    assert config.uses_embedded_broker
    assert config.broker.data_dir == str(REPO / "data")  # relative to the file
    assert config.sidecar.socket == DEFAULT_SOCKET  # where Client() looks by default
    assert config.stream_cluster("orders") == EMBEDDED_CLUSTER
    orders = config.stream_producer_settings("orders")
    assert orders["partitioner"] == "field" and orders["partitioner.config"] == {
        "field": "customer_id"
    }
    assert orders["compression.type"] == "lz4"  # inherited from producer:
    assert config.stream_producer_settings("clicks")["acks"] == 1  # overridden
    assert config.route_topic("anything-else") == "anything-else"  # default_route


def test_precedence_stream_over_producer_over_cluster():
    config = parse_config({
        "clusters": {"main": {"bootstrap.servers": "k:9092", "linger.ms": 1, "acks": 1,
                              "client.id": "c"}},
        "producer": {"linger.ms": 2},
        "streams": {"s": {"linger.ms": 3}, "t": {}},
    })
    assert config.stream_producer_settings("s") == {"linger.ms": 3, "acks": 1, "client.id": "c"}
    assert config.stream_producer_settings("t")["linger.ms"] == 2
    assert config.stream_cluster("s") == "main"  # the only cluster


@pytest.mark.parametrize(
    "data, message",
    [
        ({"sidecar": {"bogus": 1}}, "sidecar.bogus: unknown setting"),
        ({"sidecar": {"tcp_listen": "0.0.0.0:7000"}}, "must be a loopback address"),
        ({"sidecar": {"metrics_listen": "nonsense"}}, "metrics_listen must be HOST:PORT"),
        ({"sidecar": {"metrics_listen": ":9464"}}, "got ':9464': no host"),
        ({"sidecar": {"tcp_listen": "::1:7000"}}, "an IPv6 address needs brackets"),
        ({"clusters": {"a": {"bootstrap.servers": "k:9092,k2"}}},
         "clusters.a.bootstrap.servers: bootstrap.servers must be HOST:PORT, got 'k2': no port"),
        ({"sidecar": {"socket_mode": "rw"}}, "socket_mode must be an octal string"),
        ({"sidecar": {"socket_group": "no-such-group-x"}}, "'no-such-group-x' is not a group"),
        ({"broker": {"options": {"listeners": "127.0.0.1:9094"}}},
         "broker.options: listeners: PLAINTEXT is broker.listen (the sidecar's way in)"),
        ({"broker": {"options": {"listeners": "INTERNAL://127.0.0.1:9095"}}},
         "listener INTERNAL has no security protocol in listener.security.protocol.map"),
        ({"broker": {"metrics_listen": ":9464"}}, "broker.metrics_listen"),
        ({"clusters": {"a": {"bootstrap.servers": "k:9092", "sasl.password": "${env:UNSET_X}"}}},
         "clusters: a: sasl.password: environment variable UNSET_X is not set"),
        ({"sidecar": {"buffer.memory": 0}}, "sidecar.buffer.memory"),
        ({"producer": {"lingerms": 5}}, "unknown ProducerConfig key 'lingerms'"),
        ({"producer": {"compression.type": "brotli"}}, "compression.type"),
        ({"streams": {"s": {"linger.ms": -1}}}, "stream 's': invalid value for 'linger.ms'"),
        ({"streams": {"s": {"buffer.memory": 5}}}, "buffer.memory cannot be set per stream"),
        ({"streams": {"s": {"cluster": "nope"}}}, "stream 's': cluster 'nope' is not defined"),
        ({"streams": {"s": {"partitioner.config": 3}}}, "partitioner.config must be a mapping"),
        ({"clusters": {"a": {"bootstrap.servers": "x:1"}, "b": {"bootstrap.servers": "y:1"}},
          "streams": {"s": {}}}, "'cluster' is required when several clusters"),
        ({"clusters": {"a": {}}}, "clusters.a.bootstrap.servers: required"),
        ({"default_route": {"cluster": "zz"}}, "default_route: cluster 'zz' is not defined"),
        ({"broker": {"options": {"num.partitionz": 2}}}, "unknown broker option 'num.partitionz'"),
        ({"broker": {"listen": "9092"}}, "broker.listen must be HOST:PORT"),
        ({"broker": {"listen": "h:65536"}}, "port 65536 is not in 0..65535"),
        ([1, 2], "the config must be a mapping"),
    ],
)
def test_invalid_configs_name_the_problem(data, message):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert message in str(info.value)


def test_built_in_broker_takes_listeners_and_security_as_databus_broker_does():
    config = parse_config({"broker": {
        "data_dir": "/d", "listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:9465",
        "options": {"listeners": "SASL_SSL://0.0.0.0:9094,EXTERNAL://0.0.0.0:9093",
                    "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL,"
                                                      "PLAINTEXT:PLAINTEXT",
                    "authorizer.class.name": "StandardAuthorizer", "super.users": "User:a"}}})
    assert config.broker.command_args("127.0.0.1:7000") == [
        "--data-dir", "/d",
        "--listen", "127.0.0.1:7000,SASL_SSL://0.0.0.0:9094,EXTERNAL://0.0.0.0:9093",
        "--metrics-listen", "127.0.0.1:9465",
        "-o", "listener.security.protocol.map=EXTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL,"
              "PLAINTEXT:PLAINTEXT",
        "-o", "authorizer.class.name=StandardAuthorizer", "-o", "super.users=User:a"]


def test_load_errors_name_the_file(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("sidecar: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad_yaml)
    assert str(info.value) == (
        f"{bad_yaml}: invalid YAML at line 2, column 1: while parsing a flow sequence, "
        "expected ',' or ']', but got '<stream end>'"
    )
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty).sidecar.socket == DEFAULT_SOCKET


def test_no_file_routes_every_stream_a_file_keeps_its_own_rule(tmp_path):
    bare = load_config(None)
    assert bare.route_topic("any-stream") == "any-stream"
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty).default_route is None  # unlisted streams: UNKNOWN_STREAM


def test_flags_override_the_file_and_are_validated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(REPO / "sidecar.yaml")
    changed = with_overrides(
        config, socket="run/x.sock", metrics_listen="127.0.0.1:0", data_dir="d",
        listen="127.0.0.1:0", tcp_listen=None,
    )
    assert changed.sidecar.socket == str(tmp_path / "run" / "x.sock")  # relative to the cwd
    assert changed.broker.data_dir == str(tmp_path / "d")
    assert changed.broker.listen == "127.0.0.1:0"
    assert changed.streams == config.streams
    with pytest.raises(ConfigError, match="loopback"):
        with_overrides(config, tcp_listen="8.8.8.8:1")


@pytest.mark.parametrize("address", ["127.0.0.1:0", "localhost:7000", "[::1]:7000"])
def test_tcp_listen_takes_any_loopback_address(address):
    assert parse_config({"sidecar": {"tcp_listen": address}}).sidecar.tcp_listen == address


def test_default_socket_path_honours_the_environment(monkeypatch):
    monkeypatch.delenv("DATABUS_SOCKET", raising=False)
    assert default_socket_path() == DEFAULT_SOCKET
    monkeypatch.setenv("DATABUS_SOCKET", "/run/x.sock")
    assert default_socket_path() == "/run/x.sock"


def test_configuration_docs_are_generated_from_the_models():
    current = (REPO / "docs" / "configuration.md").read_text()
    assert current == gen_config_docs.render(), (
        "docs/configuration.md is stale: run python -m databus.tools.gen_config_docs"
    )
    for key in ("sidecar.buffer.memory", "linger.ms", "partitioner.config", "log.segment.bytes"):
        assert f"`{key}`" in current
