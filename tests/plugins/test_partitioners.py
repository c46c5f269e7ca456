"""The built-in partitioner plugins, through the plugin manager as the sidecar gets them."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from databus.client.partitioners import DefaultPartitioner, murmur2_partition
from databus.plugins import PluginManager, make_partitioner


@pytest.fixture(scope="module")
def pm():
    manager = PluginManager()
    manager.load_entry_points(allow=set())  # built-ins only
    return manager


def test_kafka_partitioners_are_the_clients_own(pm):
    plugin, fn = make_partitioner(pm, "default", {})
    assert plugin == "partitioners"
    assert isinstance(fn, DefaultPartitioner)
    assert fn("t", b"key", None, 12) == murmur2_partition(b"key", 12)
    assert {"default", "murmur2", "round_robin", "random", "field"} <= set(pm.partitioner_names())
    _, rr = make_partitioner(pm, "round_robin", {})
    assert [rr("t", b"k", None, 3) for _ in range(4)] == [0, 1, 2, 0]


def test_unknown_names_and_bad_options_are_clear(pm):
    with pytest.raises(ValueError, match=r"unknown partitioner 'nope' \(available: .*field"):
        make_partitioner(pm, "nope", {})
    with pytest.raises(Exception, match="takes no partitioner.config"):
        make_partitioner(pm, "default", {"x": 1})
    with pytest.raises(Exception, match="needs partitioner.config.field"):
        make_partitioner(pm, "field", {})
    with pytest.raises(Exception, match="unknown option"):
        make_partitioner(pm, "field", {"field": "a", "colour": "red"})
    with pytest.raises(Exception, match="format must be one of"):
        make_partitioner(pm, "field", {"field": "a", "format": "xml"})


def test_field_partitioner_hashes_the_field_like_a_key(pm):
    _, fn = make_partitioner(pm, "field", {"field": "customer_id"})
    doc = {"customer_id": "c-42", "amount": 3}
    expected = murmur2_partition(b"c-42", 16)
    assert fn("t", None, json.dumps(doc).encode(), 16) == expected
    assert fn("t", None, b"  " + json.dumps(doc).encode(), 16) == expected
    assert fn("t", None, msgpack.packb(doc), 16) == expected
    assert fn("t", b"ignored", msgpack.packb(doc), 16) == expected
    # Numbers hash as their JSON text; bytes as they are.
    assert fn("t", None, b'{"customer_id": 17}', 16) == murmur2_partition(b"17", 16)
    assert fn("t", None, msgpack.packb({"customer_id": b"\x00\x01"}), 16) == murmur2_partition(
        b"\x00\x01", 16
    )


def test_field_partitioner_nested_fields_and_fallbacks(pm):
    _, fn = make_partitioner(pm, "field", {"field": "customer.id", "format": "json"})
    assert fn("t", None, b'{"customer": {"id": "x"}}', 8) == murmur2_partition(b"x", 8)
    # Missing field, undecodable value, null value: the key decides, else any partition.
    assert fn("t", b"k", b'{"customer": {}}', 8) == murmur2_partition(b"k", 8)
    assert fn("t", b"k", b"not json", 8) == murmur2_partition(b"k", 8)
    assert fn("t", b"k", None, 8) == murmur2_partition(b"k", 8)
    assert 0 <= fn("t", None, b"[1, 2]", 8) < 8


@given(st.dictionaries(st.text(max_size=5),
                       st.one_of(st.text(), st.integers(-(2**63), 2**63 - 1), st.none())),
       st.integers(1, 64))
def test_field_partitioner_is_always_in_range(pm, doc, n):
    _, fn = make_partitioner(pm, "field", {"field": "f"})
    assert 0 <= fn("t", None, json.dumps(doc).encode(), n) < n
    assert 0 <= fn("t", None, msgpack.packb(doc), n) < n
