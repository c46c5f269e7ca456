"""The sidecar's placement loop in C (databus.sidecar.produce._router_speedups) against
the Python loop of router.place_frame: the same messages taken into the same group."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.protocol import speedups
from databus.sidecar.produce import router

try:
    from databus.sidecar.produce import _router_speedups
except ImportError:  # reported by test_speedups.test_the_extension_is_built_where_a_compiler_is
    _router_speedups = None

needs_ext = pytest.mark.skipif(
    _router_speedups is None, reason="the C extension is not built here (no C compiler at install)"
)

msg_id = st.integers(1, 2**64 - 1)
payload = st.one_of(st.none(), st.binary(max_size=40))
timestamp = st.integers(-(2**63), 2**63 - 1)


def test_this_process_runs_what_the_environment_says():
    """Also run on the pure-Python code (test_speedups.py's subset)."""
    expected = speedups.load_native(name="_router_speedups", package="databus.sidecar.produce")
    assert (router._place_run is None) == (expected is None)


# -- the sidecar's runs of plain keyless messages (router.place_frame) ------------------------

def place_run_py(messages, sizes, start, stream, small, now_ms, ids, group_sizes, records):
    """What place_frame's loop does, message by message, for the messages place_run takes."""
    k = start
    own = False
    while k < len(messages):
        m, size = messages[k], sizes[k]
        if (len(m) != 7 or m[1] is not stream or m[3] is not None or m[4] is not None
                or m[5] is not None or size > small):
            break
        ids.append(m[0])
        group_sizes.append(size)
        records.append((now_ms if m[6] is None else m[6], None, m[2], None))
        own |= m[6] is not None
        k += 1
    return k, own


STREAM = "orders"
run_message = st.one_of(
    # plain keyless messages of the run's stream, with or without their own timestamp
    st.tuples(msg_id, st.just(STREAM), payload, st.none(), st.none(), st.none(),
              st.none() | timestamp),
    # and what ends a run: a key, headers, a partition, another stream
    st.tuples(msg_id, st.just(STREAM), payload, st.binary(max_size=3), st.none(), st.none(),
              st.none()),
    st.tuples(msg_id, st.just(STREAM), payload, st.none(), st.just([("h", b"v")]), st.none(),
              st.none()),
    st.tuples(msg_id, st.just(STREAM), payload, st.none(), st.none(), st.integers(0, 3),
              st.none()),
    st.tuples(msg_id, st.just("other"), payload, st.none(), st.none(), st.none(), st.none()),
)


@needs_ext
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(run_message, st.integers(0, 120)), max_size=30),
       st.integers(0, 31), st.integers(0, 100))
def test_place_run_takes_what_the_python_loop_would_put_in_the_same_group(items, start, small):
    messages = [m for m, _ in items]
    sizes = [size for _, size in items]
    stream = messages[0][1] if messages and messages[0][1] == STREAM else STREAM
    if start >= len(messages):
        return
    lists = ([0], [1], [(2,)])  # the group's lists, already holding a message
    # the loop just placed messages[start]; the previous run ended at hint
    hint = data_hint = min(start, start // 2)
    k, taken, own = _router_speedups.place_run(messages, sizes, messages[start], data_hint,
                                                stream, small, 1_700_000_000_000, *lists)
    py_lists = ([0], [1], [(2,)])
    py_k, py_own = place_run_py(messages, sizes, start + 1, stream, small, 1_700_000_000_000,
                                *py_lists)
    assert (k, taken, own, lists) == (py_k, py_k - start - 1, py_own, py_lists)
    assert hint <= start


@needs_ext
def test_place_run_refuses_bad_calls():
    with pytest.raises(TypeError):
        _router_speedups.place_run((), [], None, 0, "s", 1, 0, [], [], [])
    message = (1, "s", b"v", None, None, None, None)
    with pytest.raises(ValueError, match="not in messages"):
        _router_speedups.place_run([message], [10], message, 1, "s", 99, 0, [], [], [])
