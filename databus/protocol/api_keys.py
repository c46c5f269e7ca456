"""Kafka's API keys by Kafka's names (``ApiKey.PRODUCE`` = 0, ``ApiKey.API_VERSIONS`` = 18, ...).

The one table of them: the broker's handler registry, the client's requests, the tools and
the benches name API keys through ``ApiKey``.  It is built from kio's index (the schemas we
encode and decode with), so a key has the same number here as in kio, and kio's snake-case
names upper-cased are exactly the names of Kafka's ``ApiKeys`` enum.
"""

from __future__ import annotations

import enum
from typing import Any

from kio.schema.index import api_key_map


def _from_kio() -> Any:
    return enum.IntEnum(
        "ApiKey",
        [(name.upper(), key) for key, name in sorted(api_key_map.items())],
        module=__name__,
    )


# Built from kio's table at import, so type checkers cannot list its members: to them it is Any.
ApiKey: Any = _from_kio()
ApiKey.__doc__ = "A Kafka API key (an int: usable wherever the wire wants the number)."

__all__ = ["ApiKey"]
