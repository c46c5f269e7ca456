"""Exponential backoff with jitter, as Kafka's clients compute it (``ExponentialBackoff``).

The wait after the n-th consecutive failure (n = 0, 1, ...) is ``initial * 2**n`` times a
random factor in [0.8, 1.2), so clients that failed together do not come back together,
and never more than ``max``.  A ``max`` at or below ``initial`` gives a constant ``initial``
wait without jitter, as in Kafka.  Used for ``retry.backoff.ms`` / ``retry.backoff.max.ms``
(produce retries, metadata and group rejoin retries) and ``reconnect.backoff.ms`` /
``reconnect.backoff.max.ms`` (broker connections).  Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable

JITTER = 0.2
MULTIPLIER = 2.0


class ExponentialBackoff:
    def __init__(
        self,
        initial_ms: float,
        max_ms: float,
        *,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self._random = random
        # The exponent past which the wait is capped anyway (Kafka's expMax).
        self._exp_max = (
            math.log(max_ms / max(initial_ms, 1)) / math.log(MULTIPLIER)
            if max_ms > initial_ms else 0.0
        )

    def backoff_ms(self, failures: int) -> float:
        """The wait after ``failures + 1`` consecutive failures (0: the first one)."""
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * MULTIPLIER ** min(failures, self._exp_max)
        factor = 1 - JITTER + 2 * JITTER * self._random()
        return min(term * factor, self.max_ms)
