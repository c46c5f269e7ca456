"""Time on the command line as Kafka's tools read it: an ISO-8601 date-time
(kafka-consumer-groups.sh --to-datetime; naive times are local) and an ISO-8601 duration as
Java's ``Duration.parse`` reads it (--by-duration PnDTnHnMnS).  Used by ``databus groups``,
the web console's reset and read-by-time forms and ``databus index query --since``.

The messages name Kafka's option (``option=``) because a command line reports them as is."""

from __future__ import annotations

import datetime
import re


def parse_datetime(text: str, option: str = "--to-datetime") -> int:
    """ISO-8601 -> epoch milliseconds (naive times are local, as Kafka's tool reads them)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{option} {text!r} is not an ISO-8601 date-time") from None
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str, option: str = "--by-duration") -> int:
    """ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMnS) -> milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"{option} {text!r} is not a duration such as PT30M or P1DT2H")
    d, h, m, sec = (float(match[g] or 0) for g in "dhms")
    return int((((d * 24 + h) * 60 + m) * 60 + sec) * 1000)
