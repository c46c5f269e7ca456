"""The JSON field reader in C (databus_plugins.index._json_speedups) against json.loads.

``json_fields(values, paths, bad)`` gives, per path, each value's node there, or leaves the
value *undecided* (the caller then reads it with json.loads): for every value it decides,
its nodes must be those of the decoded document walked in Python (an integer as its decimal
text), and it must decide every ordinary well-formed document (else the C code would be
dead weight, and these tests could not fail).  Checked with hypothesis on generated JSON
(escapes, duplicate keys, every scalar kind, nesting), on those documents damaged a byte at
a time and on random bytes, and on hand-picked hostile values; then the index's Extractor
with and without the C code gives the same entries and skip counts.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from databus_plugins.index.fields import _BAD, Extractor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from databus_plugins.index import _json_speedups
except ImportError:  # reported by test_speedups.test_the_extension_is_built_where_a_compiler_is
    _json_speedups = None

pytestmark = pytest.mark.skipif(
    _json_speedups is None, reason="the C extension is not built here (no C compiler at install)")

PATHS = [("a",), ("a", "b"), ("é",), ("a\"b",), ("n", "m", "o")]
KEYS = ["a", "b", "é", "a\"b", "n", "m", "o", "zz"]


def python_nodes(values: list, paths) -> list[list]:
    """The reference: the Extractor's pure-Python reading (json.loads, then the path)."""
    ex = Extractor({"f": "a"})
    docs = ex._documents(values)
    return [Extractor._walk(path, docs) for path in paths]


def same(c, py) -> bool:
    if type(py) is int:  # the C code gives an integer's text, which is what is stored
        py = str(py)
    if type(c) is float and type(py) is float and math.isnan(c):
        return math.isnan(py)
    if py is not _BAD and isinstance(py, (dict, list)):
        py = _BAD  # an object or array where a scalar was wanted: undecodable either way
    return type(c) is type(py) and c == py if c is not _BAD else py is _BAD


def check(values: list, paths=PATHS) -> list[int]:
    columns, undecided = _json_speedups.json_fields(values, paths, _BAD)
    reference = python_nodes(values, paths)
    for f, path in enumerate(paths):
        for i, value in enumerate(values):
            if i in undecided:
                assert columns[f][i] is None
            else:
                assert same(columns[f][i], reference[f][i]), (value, path, columns[f][i],
                                                               reference[f][i])
    return undecided


# -- documents written by hand, so that they can repeat keys and escape anything ----------

def escaped(text: str, draw) -> str:
    """``text`` as a JSON string, each character written plainly, as json.dumps escapes it,
    or as ``\\uXXXX`` (a surrogate pair beyond the BMP), as hypothesis draws."""
    out = []
    for ch in text:
        how = draw(st.integers(0, 2)) if ch not in '"\\' and ord(ch) >= 0x20 else \
            draw(st.integers(1, 2))
        if how == 0:
            out.append(ch)
        elif how == 1:
            out.append(json.dumps(ch)[1:-1])
        else:
            units = ch.encode("utf-16-be")
            out.append("".join(f"\\u{units[i] << 8 | units[i + 1]:04x}"
                               for i in range(0, len(units), 2)))
    return '"' + "".join(out) + '"'


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6) | st.sampled_from(KEYS)
scalars = (st.integers(-(10 ** 30), 10 ** 30) | st.floats() | st.booleans() | st.none()
           | texts)


@st.composite
def document(draw, depth=0):
    kind = draw(st.sampled_from(["scalar", "object", "object", "array"] if depth < 3
                                else ["scalar"]))
    ws = draw(st.sampled_from(["", " ", "\n\t ", "\r"]))
    if kind == "scalar":
        value = draw(scalars)
        if isinstance(value, str):
            return escaped(value, draw)
        return json.dumps(value)
    if kind == "array":
        items = draw(st.lists(document(depth + 1), max_size=3))
        return "[" + ws + ("," + ws).join(items) + "]"
    pairs = draw(st.lists(st.tuples(st.sampled_from(KEYS) | texts, document(depth + 1)),
                          max_size=4))
    return "{" + ws + ("," + ws).join(f"{escaped(k, draw)}{ws}:{ws}{v}" for k, v in pairs) \
        + ws + "}"


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(document(), min_size=1, max_size=4))
def test_well_formed_documents_are_read_as_json_loads_reads_them(docs):
    values = [d.encode() for d in docs]
    assert check(values) == []  # nothing left to Python


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(document(), st.data())
def test_damaged_documents_give_the_same_nodes_or_are_left_to_python(doc, data):
    raw = bytearray(doc.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        how = data.draw(st.sampled_from(["cut", "drop", "insert", "replace"]))
        byte = data.draw(st.sampled_from(b'{}[]",:\\ u0-eE.+\x00\x1f\x7f\xc3\xa9\xed\xa0\xff'))
        if how == "cut":
            del raw[at:]
        elif how == "drop":
            del raw[at:at + 1]
        elif how == "insert":
            raw[at:at] = bytes([byte])
        else:
            raw[at:at + 1] = bytes([byte])
    check([bytes(raw)])


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=40), max_size=4))
def test_random_bytes_give_the_same_nodes_or_are_left_to_python(values):
    check(values)


@pytest.mark.parametrize("raw, decided", [
    (b'{"a": 1, "a": {"b": 2}}', True),              # the last key counts
    (b'{"a": {"b": 1}, "a": {"c": 2}}', True),       # ... even if it lacks what the first had
    (b'{"a": {"b": 1}, "a": null}', True),
    (b'{"a": {"b": 1}, "a": "s"}', True),            # a path through a string
    (b'{"\\u0061": {"\\u0062": "\\ud834\\udd1e"}}', True),  # escaped keys, a surrogate pair
    (b'{"a\\"b": 1, "\\u00e9": "\\/\\b\\f\\n\\r\\t"}', True),
    (b'{"a": -0}', True), (b'{"a": -0.0}', True), (b'{"a": 1e400}', True),
    (b'{"a": NaN}', True), (b'{"a": -Infinity}', True), (b'{"a": Infinity}', True),
    (b'{"a": 12345678901234567890123}', True),
    (b' \t\n{"a": [1, {"b": 2}]} \r\n', True), (b"null", True), (b"[1]", True),
    (b'"a"', True), (b"{}", True), (b'{"a": "\x7f"}', True),
    (b'{"a": ' + b"1" * 700 + b"}", False),          # int() may refuse so many digits
    (b'{"a": "\\ud800"}', False),                     # a lone surrogate
    (b'{"a": "\\udc00\\ud800"}', False),
    (b'{"a": "\xed\xa0\x80"}', False),                # an encoded surrogate (json.loads takes it)
    (b'\xef\xbb\xbf{"a": 1}', False),                 # a BOM
    ('{"a": 1}'.encode("utf-16"), False), ('{"a": 1}'.encode("utf-32-le"), False),
    (b'{"a": ' + b"[" * 150 + b"]" * 150 + b"}", False),  # deeper than the C code goes
    (b'{"a": "\x01"}', False), (b'{"a": "\\x"}', False), (b'{"a": 01}', False),
    (b'{"a": 1.}', False), (b'{"a": .5}', False), (b'{"a": 1e}', False), (b'{"a": +1}', False),
    (b'{"a": 1,}', False), (b'{"a" 1}', False), (b"{'a': 1}", False), (b'{"a": tru}', False),
    (b'{"a": -NaN}', False), (b'{"a": 1} x', False), (b'{"a": 1}{}', False), (b"", False),
    (b'{"a": "\xc0\x80"}', False), (b'{"a": "\xf4\x90\x80\x80"}', False), (b"\xff", False),
])
def test_hostile_values(raw, decided):
    assert (check([raw]) == []) is decided


def test_this_process_runs_what_the_environment_says():
    """Run by test_speedups' pure-Python subset too, with DATABUS_PURE_PYTHON=1."""
    forced = os.environ.get("DATABUS_PURE_PYTHON", "") not in ("", "0")
    assert (Extractor({"f": "a"})._native is None) is forced
    assert Extractor({"f": "a"}, "msgpack")._native is None


def test_values_that_are_not_bytes_are_left_to_python():
    assert check([None, bytearray(b'{"a": 1}'), b'{"a": 2}']) == [1]


records = st.lists(st.tuples(st.one_of(document().map(str.encode), st.binary(max_size=20),
                                       st.none()), st.integers(0, 9)), max_size=6)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_the_extractor_gives_the_same_entries_with_and_without_the_c_code(rows):
    fields = {"one": "a", "two": "value.a.b", "three": "é", "again": "a", "key": "key"}
    batch = [("t", 0, i, ts, 0, b"k", value, ()) for i, (value, ts) in enumerate(rows)]
    c = Extractor(fields)
    c._native = _json_speedups.json_fields  # also where DATABUS_PURE_PYTHON=1 turned it off
    pure = Extractor(fields)
    pure._native = None
    (c_entries, c_skipped), (py_entries, py_skipped) = c.entries(batch), pure.entries(batch)
    assert {f: sorted(g) for f, g in c_entries.items()} == \
        {f: sorted(g) for f, g in py_entries.items()}
    assert c_skipped == py_skipped
