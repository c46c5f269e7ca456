"""The console's pure parts: how a record's bytes are shown, the samples it keeps (lag per
group, end offsets per topic) and the lag chart's SVG geometry.  Plain data in, data out,
no trio, no HTTP: tested directly (tests/console/test_view.py).
"""

from __future__ import annotations

import datetime
import json
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

import msgpack

# Bytes shown of one binary key/value; the rest is counted, not sent to the browser.
HEX_LIMIT = 4096
TEXT_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Shown:
    """A key, value or header as the message browser shows it: ``kind`` is one of null,
    json, text, msgpack, hex (the badge beside it) and ``text`` what is printed."""

    kind: str
    text: str


def show_bytes(data: bytes | None) -> Shown:
    """JSON pretty-printed, other UTF-8 text as is, msgpack decoded, anything else as hex.

    Text is tried before msgpack because every ASCII digit or short word is also a valid
    msgpack document (a positive fixint, a fixstr): "42" is the text 42, not the number."""
    if data is None:
        return Shown("null", "null")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and (text.isprintable() or _is_plain_text(text)):
        stripped = text.strip()
        if stripped[:1] in ("{", "["):
            try:
                return Shown("json", _cut(json.dumps(json.loads(stripped), indent=2,
                                                     ensure_ascii=False)))
            except ValueError:
                pass
        return Shown("text", _cut(text))
    try:
        decoded = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext)
    except Exception:  # msgpack raises several unrelated types for bytes that are not msgpack
        decoded = _NOT_MSGPACK
    if decoded is not _NOT_MSGPACK:
        return Shown("msgpack", _cut(json.dumps(decoded, indent=2, ensure_ascii=False,
                                                default=_msgpack_default)))
    return Shown("hex", hex_dump(data))


_NOT_MSGPACK = object()


def _cut(text: str) -> str:
    """At most TEXT_LIMIT characters of a shown text, saying how many were left out."""
    if len(text) <= TEXT_LIMIT:
        return text
    return f"{text[:TEXT_LIMIT]}\n... {len(text) - TEXT_LIMIT} more characters"


def _is_plain_text(text: str) -> bool:
    # Newlines and tabs make text not "printable" to Python, but it is still text.
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def _ext(code: int, data: bytes) -> dict:
    # An application's extension type: its code and bytes (ExtType is a tuple, which JSON
    # would print as a bare list).
    return {"ext": code, "data": data.hex()}


def _msgpack_default(value):
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)  # msgpack.Timestamp and the like


def hex_dump(data: bytes) -> str:
    """Space-separated hex, 16 bytes a line, cut at HEX_LIMIT bytes (saying how many more)."""
    shown = data[:HEX_LIMIT]
    lines = [shown[i:i + 16].hex(" ") for i in range(0, len(shown), 16)]
    if len(data) > HEX_LIMIT:
        lines.append(f"... {len(data) - HEX_LIMIT} more bytes")
    return "\n".join(lines)


class Samples:
    """The last ``keep`` (time, value) samples per key: lag per consumer group, summed end
    offsets per topic.  The console takes them itself on a timer, so a chart has history only
    for as long as the console has run (documented in docs/console.md)."""

    def __init__(self, keep: int = 360) -> None:
        self.keep = keep
        self._series: dict[Hashable, deque[tuple[float, int]]] = {}

    def add(self, key: Hashable, at: float, value: int) -> None:
        self._series.setdefault(key, deque(maxlen=self.keep)).append((at, value))

    def series(self, key: Hashable) -> list[tuple[float, int]]:
        return list(self._series.get(key, ()))

    def forget_missing(self, present: set) -> None:
        """Drop the series of keys no longer in the cluster (a deleted group or topic)."""
        for key in [k for k in self._series if k not in present]:
            del self._series[key]

    def rate(self, key: Hashable, window: int = 12) -> float | None:
        """Per second growth over the last ``window`` samples (a topic's end offsets:
        messages/s over about a minute at the default 5 s interval); None with fewer than
        two samples."""
        points = self._series.get(key)
        if not points or len(points) < 2:
            return None
        (t0, v0), (t1, v1) = points[max(0, len(points) - window)], points[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else None


@dataclass(frozen=True)
class Chart:
    """An SVG polyline of samples: ``points`` for ``<polyline points=...>`` inside a
    ``width`` x ``height`` box, with the top of the y axis and the latest value as labels."""

    width: int
    height: int
    points: str
    y_max: int
    last: int | None
    seconds: float

    @property
    def empty(self) -> bool:
        return not self.points


def chart(samples: list[tuple[float, int]], width: int = 600, height: int = 160,
          pad: int = 6, left: int = 40) -> Chart:
    """Scale samples to the box: time left to right (after a ``left`` margin for the axis
    labels), 0 at the bottom, the largest value (at least 1, so a flat zero line sits on the
    floor) at the top."""
    if not samples:
        return Chart(width, height, "", 0, None, 0.0)
    if len(samples) == 1:
        # A line needs two points: one sample is drawn as a level line across the box.
        (t, v), = samples
        samples = [(t, v), (t, v)]
    t0, t1 = samples[0][0], samples[-1][0]
    span = t1 - t0
    y_max = max(1, max(v for _, v in samples))
    inner_w, inner_h = width - left - pad, height - 2 * pad
    coords = []
    for i, (t, v) in enumerate(samples):
        # All at one instant: spread them evenly instead of dividing by 0.
        fx = (t - t0) / span if span > 0 else i / (len(samples) - 1)
        x = left + fx * inner_w
        y = pad + inner_h - (v / y_max) * inner_h
        coords.append(f"{x:.1f},{y:.1f}")
    return Chart(width, height, " ".join(coords), y_max, samples[-1][1], span)


def format_ms(ms: int) -> str:
    """A record's timestamp (epoch ms) as ISO-8601 UTC; Kafka's -1 (none) as '-'."""
    if ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_bytes(size: int | None) -> str:
    """A size as people read it (binary units, as `du -h`); None as '-'."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
