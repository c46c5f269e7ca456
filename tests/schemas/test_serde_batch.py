"""Typed streams' batch path (``Codec.encode_many``; for Avro the C transcoder from msgpack,
databus/schemas/_avro_speedups.c): for every value it gives what the per-record path gives —
the same bytes, or the same refusal naming the same field and rule — and it does take the
common values itself (else the batch path would be the slow path under another name)."""

from __future__ import annotations

import json
import math
import random

import msgpack
import pytest

from databus.schemas.serde import Codec, RecordError, avro_native, parse_input

from .test_serde import GOOD, ORDER

needs_c = pytest.mark.skipif(avro_native is None, reason="the C extension is not built here "
                             "(or DATABUS_PURE_PYTHON is set): only the per-record path runs")

WIDE = {"type": "record", "name": "Wide", "fields": [
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "raw", "type": "bytes"},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "pick", "type": ["null", "long", "string", {"type": "record", "name": "Wide2",
                                                          "fields": [{"name": "x", "type": "int",
                                                                      "default": 7}]}]},
    {"name": "num", "type": ["double", "long"], "default": 0.5},
    {"name": "nested", "type": "Wide2", "default": {}},
]}
WIDE_GOOD = {"b": True, "i": -5, "f": 1.25, "d": 2.5, "s": "héllo", "raw": b"\x00\xff",
             "tags": {"a": 1, "b": -2}, "pick": None}


def per_record(codec: Codec, data: bytes, how: str = "auto"):
    try:
        return codec.encode(parse_input(data, how))
    except RecordError as exc:
        return (exc.path, exc.rule, exc.detail)


def batch(codec: Codec, values: list[bytes], how: str = "auto") -> list:
    return [(x.path, x.rule, x.detail) if isinstance(x, RecordError) else x
            for x in codec.encode_many(values, how)]


CASES = [  # (schema, value to pack as msgpack)
    (ORDER, GOOD),
    (ORDER, {**GOOD, "price": 1.5, "status": "PAID", "lines": [{"sku": "x", "qty": 3}],
             "more": [{"qty": 1, "sku": "y"}], "digest": b"abcd"}),
    (ORDER, {"item": "pen", "order_id": 2}),  # keys out of the schema's order
    (ORDER, {"item": "pen", "order_id": 2, "price": 3}),  # an int in a double's union
    (ORDER, {**GOOD, "order_id": "1"}),
    (ORDER, {"item": "pen"}),
    (ORDER, {**GOOD, "colour": "red"}),
    (ORDER, {**GOOD, "status": "LOST"}),
    (ORDER, {**GOOD, "order_id": 2**63}),
    (ORDER, {**GOOD, "order_id": -(2**63)}),
    (ORDER, {**GOOD, "lines": [{"sku": "a", "qty": 1}, {"sku": "b"}]}),
    (ORDER, {**GOOD, "more": [{"sku": "a", "qty": 2**31}]}),
    (ORDER, {**GOOD, "price": "cheap"}),
    (ORDER, {**GOOD, "digest": b"abc"}),
    (ORDER, {**GOOD, "item": b"bytes, not a string"}),
    (ORDER, [1, 2]),
    (WIDE, WIDE_GOOD),
    (WIDE, {**WIDE_GOOD, "f": 3, "d": 4, "pick": "s", "num": 9, "nested": {"x": 1}}),
    (WIDE, {**WIDE_GOOD, "f": float("nan"), "d": -math.inf, "pick": {"x": 2}, "num": 1.5}),
    (WIDE, {**WIDE_GOOD, "f": 1e39}),  # too big for Avro's float
    (WIDE, {**WIDE_GOOD, "f": math.inf, "tags": {}}),
    (WIDE, {**WIDE_GOOD, "i": True}),
    (WIDE, {**WIDE_GOOD, "b": 1}),
    (WIDE, {**WIDE_GOOD, "tags": {"a": "x"}}),
    (WIDE, {**WIDE_GOOD, "pick": 1.5}),
    (WIDE, {**WIDE_GOOD, "pick": {"x": 2, "y": 3}}),
    (WIDE, {**WIDE_GOOD, "nested": {"x": 2**40}}),
    (WIDE, {**WIDE_GOOD, "raw": "text"}),
]


@pytest.mark.parametrize(("schema", "value"), CASES)
def test_batch_is_the_per_record_path(schema, value):
    codec = Codec(9, "AVRO", json.dumps(schema))
    data = msgpack.packb(value, use_bin_type=True)
    assert batch(codec, [data]) == [per_record(codec, data)]


ODD_BYTES = [
    b"\x81\xa8order_id\x01\x81",  # trailing bytes: msgpack's ExtraData
    b"\x82\xa8order_id\x01",  # truncated
    b"\x82\xa8order_id\x01\xa4item\xa2\xff\xfe",  # a str that is not UTF-8
    b"\x83\xa8order_id\x01\xa4item\xa1a\xa8order_id\x02",  # a repeated key: the last wins
    b"\x82\xa8order_id\xd4\x01\x00\xa4item\xa1a",  # an ext type
    b'{"order_id": 1, "item": "pen"}',  # JSON text
    b"\x82\x01\x01\xa4item\xa1a",  # an int key
    b"",
]


@pytest.mark.parametrize("data", ODD_BYTES)
def test_odd_bytes_are_left_to_the_per_record_path(data):
    codec = Codec(9, "AVRO", json.dumps(ORDER))
    assert batch(codec, [data]) == [per_record(codec, data)]


def test_input_modes_and_scalar_schemas():
    codec = Codec(3, "AVRO", '"long"')
    five = msgpack.packb(5)
    assert batch(codec, [five, b"5"], "msgpack") == [per_record(codec, five, "msgpack"),
                                                      per_record(codec, b"5", "msgpack")]
    # auto: a msgpack scalar is JSON text to parse_input (0x05 is not), never a long here
    assert batch(codec, [b"5", five]) == [per_record(codec, b"5"), per_record(codec, five)]
    data = msgpack.packb(GOOD)
    order = Codec(4, "AVRO", json.dumps(ORDER))
    assert batch(order, [data], "json") == [per_record(order, data, "json")]


@needs_c
def test_the_c_path_takes_the_common_values_and_matches_fastavro():
    """Random records, good and broken: where the C path answers, its bytes are
    fastavro's (through the per-record path), and it answers every good one."""
    codec = Codec(11, "AVRO", json.dumps(WIDE))
    assert codec._program is not None
    rng = random.Random(38)
    values, good = [], []
    for n in range(3000):
        value = {**WIDE_GOOD, "i": rng.randint(-(2**31), 2**31 - 1),
                 "f": rng.uniform(-1e6, 1e6), "d": rng.random() * 10**rng.randint(-300, 300),
                 "s": "".join(rng.choice("aé€𝄞z") for _ in range(rng.randint(0, 40))),
                 "raw": rng.randbytes(rng.randint(0, 20)),
                 "tags": {str(k): rng.randint(-(2**63), 2**63 - 1)
                          for k in range(rng.randint(0, 5))},
                 "pick": rng.choice([None, n, "p", {"x": n % 100}, {}])}
        for key in rng.sample(sorted(value), rng.randint(0, 3)):
            del value[key]  # some of them break the schema, some take defaults
        items = list(value.items())
        rng.shuffle(items)
        values.append(msgpack.packb(dict(items), use_bin_type=True))
        good.append(all(k in value for k in WIDE_GOOD))
    native = avro_native.encode_many(codec._program, b"\0\0\0\0\x0b", values, True)
    for data, fast, is_good in zip(values, native, good):
        expected = per_record(codec, data)
        if fast is not None:
            assert fast == expected
        elif is_good:
            pytest.fail(f"the C path left a good value to the per-record path: {data!r}")
    assert batch(codec, values) == [per_record(codec, data) for data in values]


@needs_c
def test_schemas_the_c_path_leaves_to_fastavro():
    """Logical types, recursion and unions fastavro does not decide by first match have no
    program: the per-record path writes them (and they still encode)."""
    for schema, value in [
        ({"type": "record", "name": "T", "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]},
         {"at": 5}),
        ({"type": "record", "name": "Node", "fields": [
            {"name": "next", "type": ["null", "Node"]}]}, {"next": {"next": None}}),
        ({"type": "record", "name": "F", "fields": [{"name": "v", "type": ["float", "double"]}]},
         {"v": 1.1}),
    ]:
        codec = Codec(5, "AVRO", json.dumps(schema))
        assert codec._program is None
        data = msgpack.packb(value)
        assert batch(codec, [data]) == [per_record(codec, data)]
        assert isinstance(batch(codec, [data])[0], bytes)


def test_json_schema_batch():
    codec = Codec(6, "JSON", json.dumps({"type": "object", "properties": {
        "n": {"type": "integer"}}, "required": ["n"]}))
    values = [msgpack.packb({"n": 1}), b'{"n": "x"}', b"{}"]
    assert batch(codec, values) == [per_record(codec, v) for v in values]


@pytest.mark.parametrize("native", [True, False], ids=["C", "per-record"])
def test_a_frame_encoded_in_place(native, monkeypatch):
    """``encode_frame`` (the sidecar's path, router.py), with the C pass and without it:
    only the stream's messages with an app value change, each to what the per-record path
    writes; refusals come back with their index and the checker's field and rule."""
    if native and avro_native is None:
        pytest.skip("the C extension is not built here: the per-record case covers it")
    if not native:
        monkeypatch.setattr("databus.schemas.serde.avro_native", None)
    codec = Codec(12, "AVRO", json.dumps(ORDER))
    assert (codec._program is not None) == native
    good, bad = msgpack.packb(GOOD), msgpack.packb({**GOOD, "status": "LOST"})
    cancel = [("databus-delay-cancel", b"x")]
    frame = [(1, "orders", good, None, None, None, None),
             (2, "other", good, b"k", None, None, None),
             (3, "orders", bad, None, None, None, None),
             (4, "orders", b'{"order_id": 4, "item": "ink"}', None, None, None, None),
             (5, "orders", b"", None, cancel, None, None),
             (6, "orders", good, b"k", [("h", b"v")], 0, 17)]
    before = list(frame)
    refused = codec.encode_frame(frame, "orders", "auto", ("databus-delay-cancel",))
    assert [(i, exc.path, exc.rule) for i, exc in refused] == [(2, "$.status", "enum")]
    assert frame[0] == (1, "orders", codec.encode(GOOD), None, None, None, None)
    assert frame[1] is before[1] and frame[2] is before[2] and frame[4] is before[4]
    assert frame[3][2] == codec.encode({"order_id": 4, "item": "ink"})
    assert frame[5] == (6, "orders", codec.encode(GOOD), b"k", [("h", b"v")], 0, 17)


JSON_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
               "definitions": {"sku": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}},
               "properties": {
                   "n": {"type": "integer", "minimum": 0, "exclusiveMaximum": 100},
                   "ratio": {"type": "number", "multipleOf": 0.5},
                   "name": {"type": "string", "minLength": 1, "maxLength": 3},
                   "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True,
                            "maxItems": 2},
                   "sku": {"$ref": "#/definitions/sku"},
                   "kind": {"enum": ["a", "b", None]},
                   "when": {"type": "string", "format": "date-time"},
                   "either": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]},
                   "nested": {"type": "object", "properties": {"x": {"const": 1}},
                              "additionalProperties": False}},
               "required": ["n"], "additionalProperties": False}
JSON_VALUES = [
    {"n": 1}, {"n": 1.0}, {"n": True}, {"n": -1}, {"n": 100}, {"n": 99, "ratio": 1.5},
    {"n": 1, "ratio": 1.2}, {"n": 1, "name": ""}, {"n": 1, "name": "abcd"},
    {"n": 1, "name": "é€𝄞"}, {"n": 1, "tags": ["a", "a"]}, {"n": 1, "tags": ["a", 1]},
    {"n": 1, "tags": ["a", "b", "c"]}, {"n": 1, "sku": "AB-12"}, {"n": 1, "sku": "ab-12"},
    {"n": 1, "kind": None}, {"n": 1, "kind": "c"}, {"n": 1, "when": "not a date"},
    {"n": 1, "either": 1}, {"n": 1, "either": False}, {"n": 1, "either": 1.5},
    {"n": 1, "nested": {"x": 1}}, {"n": 1, "nested": {"x": True}},
    {"n": 1, "nested": {"x": 1, "y": 2}}, {"n": 1, "extra": 0}, {}, [1], "text",
]


def test_json_schema_takes_what_jsonschema_takes():
    """The compiled predicate (fastjsonschema) before jsonschema: a value is taken exactly
    when jsonschema's validator takes it, and a refusal still names jsonschema's keyword."""
    import jsonschema

    codec = Codec(7, "JSON", json.dumps(JSON_SCHEMA))
    validator = jsonschema.Draft7Validator(JSON_SCHEMA)
    values = [msgpack.packb(v) if isinstance(v, (dict, list)) else json.dumps(v).encode()
              for v in JSON_VALUES]
    for value, got in zip(JSON_VALUES, codec.encode_many(values)):
        assert isinstance(got, bytes) == validator.is_valid(value), value
        if isinstance(got, bytes):
            assert json.loads(got[5:]) == value
        else:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            assert (got.path, got.rule) == (error.json_path, error.validator)


@needs_c
def test_read_back_as_msgpack_is_what_fastavro_reads():
    """Subscribers' path (``decode_msgpack``, C from Avro straight to msgpack): the bytes
    ``msgpack.packb`` makes of fastavro's decoded value, for random records; a damaged
    value is left to fastavro (None)."""
    codec = Codec(13, "AVRO", json.dumps(WIDE))
    rng = random.Random(3)
    for n in range(2000):
        value = {**WIDE_GOOD, "i": rng.randint(-(2**31), 2**31 - 1),
                 "f": rng.uniform(-1e6, 1e6), "d": rng.random() * 10**rng.randint(-300, 300),
                 "s": "".join(rng.choice("aé€𝄞z") for _ in range(rng.randint(0, 300))),
                 "raw": rng.randbytes(rng.randint(0, 300)),
                 "tags": {str(k): rng.randint(-(2**63), 2**63 - 1)
                          for k in range(rng.randint(0, 20))},
                 "pick": rng.choice([None, n, "p", {"x": n % 100}]),
                 "num": rng.choice([0.5, 2**40]), "nested": {"x": -n}}
        data = codec.encode(value)
        assert codec.decode_msgpack(data) == msgpack.packb(codec.decode(data),
                                                           use_bin_type=True)
    assert codec.decode_msgpack(data[:-1]) is None
    assert codec.decode_msgpack(data + b"\x00") is None
    order = Codec(14, "AVRO", json.dumps(ORDER))
    data = order.encode({**GOOD, "lines": [{"sku": "x", "qty": -3}] * 20, "status": "PAID"})
    assert order.decode_msgpack(data) == msgpack.packb(order.decode(data), use_bin_type=True)
