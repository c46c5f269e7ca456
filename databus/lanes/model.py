"""The lane registry as plain data: its records, the state they fold into, and the rules
read from that state (which lanes are live, which have consumers, who cleans up an expired
lane).  No I/O: ``registry.py`` feeds it the records of the registry topic in offset order.

The registry topic is compacted and has one partition, so every reader sees the same records
in the same order.  Keys (UTF-8) and values (JSON objects; null is a tombstone):

* ``lane/NAME``: the lane: ``owner``, ``created`` and ``expires`` (ms since the epoch),
  ``ttl_ms``, ``partitions`` and ``retention_ms`` of its topics.  ``extend`` rewrites it.
* ``consumer/NAME/ID``: a lane consumer's heartbeat: ``heartbeat`` (ms), ``interval_ms``,
  ``host``, ``pid``, ``group``.  It counts as live for ``LIVENESS_INTERVALS`` intervals after
  its last heartbeat; a consumer that closes cleanly writes the tombstone.
* ``expire/NAME/CREATED/CLAIMANT``: a claim to clean up the expired lane created at CREATED.
  The claim with the lowest offset wins (compaction keeps offsets, and each claimant has its
  own key, so every reader, now or after compaction, names the same winner): exactly one
  sidecar deletes the lane's topics and writes the lane's tombstone.  A claim older than
  ``CLAIM_TIMEOUT_MS`` whose lane still exists has died with its claimant; claims made after
  it compete again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

LANE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A consumer is live for this many of its heartbeat intervals after its last heartbeat.
LIVENESS_INTERVALS = 3
CLAIM_TIMEOUT_MS = 60_000
DEFAULT_TEMPLATE = "{topic}.lane.{lane}"


def check_lane_name(name: str) -> str:
    """``name`` if it can name a lane, else ValueError saying what may (a lane goes into
    topic names, so no dots: ``{topic}.lane.{lane}`` must split back unambiguously)."""
    if not isinstance(name, str) or not LANE_NAME.match(name):
        raise ValueError(
            f"invalid lane name {name!r}: 1 to 64 letters, digits, '_' or '-'"
        )
    return name


def check_template(template: str) -> str:
    if template.count("{topic}") != 1 or template.count("{lane}") != 1:
        raise ValueError(f"lane topic template {template!r} needs {{topic}} and {{lane}} once each")
    return template


def lane_topic(template: str, topic: str, lane: str) -> str:
    return template.replace("{topic}", topic).replace("{lane}", lane)


def lane_topic_pattern(template: str, lane: str | None = None) -> re.Pattern:
    """A regex whose match of a whole topic name gives ``topic`` and ``lane`` groups."""
    lane_re = re.escape(lane) if lane is not None else "[A-Za-z0-9_-]{1,64}"
    out = re.escape(template)
    out = out.replace(re.escape("{topic}"), "(?P<topic>.+?)", 1)
    out = out.replace(re.escape("{lane}"), f"(?P<lane>{lane_re})", 1)
    return re.compile(out)


def _lane_topics_regex(template: str, topic_re: str, lane_re: str) -> str:
    """A regex (no groups) of the lane topics of topics matching ``topic_re`` and lanes
    matching ``lane_re``."""
    out = re.escape(template)
    out = out.replace(re.escape("{topic}"), f"(?:{topic_re})", 1)
    return out.replace(re.escape("{lane}"), f"(?:{lane_re})", 1)


# What a reader that is not a LaneConsumer (a sink, an index) reads: `lanes: main | all | LANE`.
READER_LANES_MAIN, READER_LANES_ALL = "main", "all"


def check_reader_lanes(value: str) -> str:
    if value in (READER_LANES_MAIN, READER_LANES_ALL):
        return value
    try:
        return check_lane_name(value)
    except ValueError as exc:
        raise ValueError(f"lanes: `main`, `all` or a lane name, got {value!r} ({exc})") from None


def reader_selection(topics: list[str], regex: str | None, lanes: str,
                     template: str) -> tuple[list[str], str | None]:
    """What a reader of ``topics`` (or of the topics matching ``regex``) subscribes to,
    following the lane policy ``lanes``, as (topic names, None) or ([], a regex of whole
    names):

    * ``main``: the main lane only: ``topics`` themselves; a regex never matches a lane topic
      (``orders.*`` would otherwise read ``orders.lane.x``).
    * a lane name: that lane's topics of ``topics`` (or of the topics matching ``regex``).
    * ``all``: the topics and every lane topic of them, existing or made later.
    """
    any_lane = LANE_NAME.pattern[1:-1]  # (the name's characters, unanchored)
    base = regex if regex is not None else "|".join(map(re.escape, topics))
    if lanes == READER_LANES_MAIN:
        if regex is None:
            return list(topics), None
        return [], f"(?!{_lane_topics_regex(template, '.+', any_lane)}\\Z)(?:{regex})"
    if lanes == READER_LANES_ALL:
        return [], f"(?:{base})|{_lane_topics_regex(template, base, any_lane)}"
    if regex is None:
        return [lane_topic(template, t, lanes) for t in topics], None
    return [], _lane_topics_regex(template, regex, re.escape(lanes))


def parse_lane_topic(template: str, name: str) -> tuple[str, str] | None:
    """(main topic, lane) of a lane topic's ``name``, None for any other topic."""
    match = lane_topic_pattern(template).fullmatch(name)
    return (match.group("topic"), match.group("lane")) if match else None


@dataclass(frozen=True)
class Lane:
    name: str
    owner: str
    created: int
    ttl_ms: int
    expires: int
    partitions: int = 1
    retention_ms: int = 6 * 3600 * 1000

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires


@dataclass(frozen=True)
class LaneConsumer:
    lane: str
    id: str
    heartbeat: int
    interval_ms: int
    host: str = ""
    pid: int = 0
    group: str = ""

    def live(self, now_ms: int) -> bool:
        return now_ms < self.heartbeat + LIVENESS_INTERVALS * self.interval_ms


@dataclass(frozen=True)
class Claim:
    lane: str
    created: int
    claimant: str
    at: int
    offset: int = -1


def lane_key(name: str) -> bytes:
    return f"lane/{name}".encode()


def consumer_key(lane: str, id_: str) -> bytes:
    return f"consumer/{lane}/{id_}".encode()


def claim_key(lane: str, created: int, claimant: str) -> bytes:
    return f"expire/{lane}/{created}/{claimant}".encode()


def encode(record) -> bytes:
    """The JSON value of a Lane, LaneConsumer or Claim (the offset is the log's, not stored)."""
    data = asdict(record)
    data.pop("offset", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class Registry:
    """The registry's state after the records applied so far (``apply``, in offset order)."""

    lanes: dict[str, Lane] = field(default_factory=dict)
    consumers: dict[tuple[str, str], LaneConsumer] = field(default_factory=dict)
    claims: dict[tuple[str, int, str], Claim] = field(default_factory=dict)
    # records that did not parse: (offset, why); kept, never fatal (another version wrote them)
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        try:
            kind, _, rest = (key or b"").decode().partition("/")
            data = json.loads(value) if value is not None else None
            if kind == "lane":
                if data is None:
                    self.lanes.pop(rest, None)
                else:
                    self.lanes[rest] = Lane(**{k: data[k] for k in Lane.__dataclass_fields__
                                               if k in data})
            elif kind == "consumer":
                lane, _, id_ = rest.partition("/")
                if data is None:
                    self.consumers.pop((lane, id_), None)
                else:
                    self.consumers[(lane, id_)] = LaneConsumer(
                        **{k: data[k] for k in LaneConsumer.__dataclass_fields__ if k in data})
            elif kind == "expire":
                lane, created, claimant = rest.split("/", 2)
                ident = (lane, int(created), claimant)
                if data is None:
                    self.claims.pop(ident, None)
                else:
                    self.claims[ident] = Claim(lane, int(created), claimant, int(data["at"]),
                                               offset)
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            self.skipped.append((offset, f"{key!r}: {exc}"))

    # --- what the rules read ---------------------------------------------------------------

    def live_lane(self, name: str, now_ms: int) -> Lane | None:
        lane = self.lanes.get(name)
        return lane if lane is not None and lane.live(now_ms) else None

    def live_consumers(self, lane: str, now_ms: int) -> list[LaneConsumer]:
        return [c for (name, _), c in self.consumers.items() if name == lane and c.live(now_ms)]

    def orphans(self, now_ms: int) -> list[str]:
        """Live lanes without a live consumer: what a main consumer with
        ``main.consume.orphans`` takes over."""
        return sorted(name for name, lane in self.lanes.items()
                      if lane.live(now_ms) and not self.live_consumers(name, now_ms))

    def expired(self, now_ms: int) -> list[Lane]:
        return [lane for lane in self.lanes.values() if not lane.live(now_ms)]

    def claim_winner(self, lane: Lane, now_ms: int) -> Claim | None:
        """The claim that cleans ``lane`` up: the first in the log among those not timed
        out (None: nobody holds it, a sidecar should claim it)."""
        fresh = [c for c in self.claims.values()
                 if c.lane == lane.name and c.created == lane.created
                 and now_ms - c.at < CLAIM_TIMEOUT_MS]
        return min(fresh, key=lambda c: c.offset, default=None)

    def stale_claims(self) -> list[Claim]:
        """Claims whose lane (that incarnation) is gone: their tombstones are due."""
        return [c for c in self.claims.values()
                if (lane := self.lanes.get(c.lane)) is None or lane.created != c.created]


def subscription(state: Registry, topics: list[str], template: str, now_ms: int, *,
                 lane: str | None, consume_main: bool, consume_orphans: bool,
                 existing: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The topics a consumer of ``topics`` reads now.

    A lane consumer: its lane's topics while the lane is live, plus ``topics`` with
    ``consume_main`` (TSF's laneConsumeMain).  A main consumer: ``topics``, plus with
    ``consume_orphans`` the ``existing`` topics of live lanes that have no live consumer
    (MSE's fallback); the topics of a lane with a live consumer never.
    """
    if lane is not None:
        out = [lane_topic(template, t, lane) for t in topics] if state.live_lane(lane, now_ms) \
            else []
        return out + list(topics) if consume_main else out
    out = list(topics)
    if consume_orphans:
        out += [name for orphan in state.orphans(now_ms) for t in topics
                if (name := lane_topic(template, t, orphan)) in existing]
    return out
