"""FrameBuffer (the server's frame splitter) cuts the same frames whatever the chunking."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from databus.protocol.framing import FrameBuffer


@settings(max_examples=80, deadline=None)
@given(frames=st.lists(st.binary(max_size=3000), max_size=20),
       cuts=st.lists(st.integers(1, 5000), min_size=1, max_size=50))
def test_any_chunking_yields_the_frames(frames, cuts):
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    buffer = FrameBuffer(1 << 20)
    out, pos, i = [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        buffer.feed(stream[pos:pos + step])
        pos += step
        i += 1
        out.extend(buffer.frames())
    assert out == frames
    assert buffer.buffered == 0


def test_a_partial_frame_is_counted_as_buffered():
    buffer = FrameBuffer(1 << 20)
    buffer.feed(struct.pack(">i", 10) + b"abc")
    assert buffer.next_frame() is None
    assert buffer.buffered == 7
    buffer.feed(b"defghij")
    assert buffer.next_frame() == b"abcdefghij"
