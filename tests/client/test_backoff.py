"""ExponentialBackoff, the pure schedule behind retry.backoff.* and reconnect.backoff.*."""

from __future__ import annotations

import pytest

from databus.client.backoff import ExponentialBackoff


def test_doubles_from_initial_and_is_capped_at_max():
    backoff = ExponentialBackoff(50, 1000, random=lambda: 0.5)  # jitter factor exactly 1
    assert [backoff.backoff_ms(n) for n in range(8)] == pytest.approx(
        [50, 100, 200, 400, 800, 1000, 1000, 1000]
    )


@pytest.mark.parametrize(("draw", "factor"), [(0.0, 0.8), (0.999999, 1.2)])
def test_jitter_is_twenty_percent_either_way_but_never_above_max(draw, factor):
    backoff = ExponentialBackoff(100, 1000, random=lambda: draw)
    assert backoff.backoff_ms(0) == pytest.approx(100 * factor, rel=1e-5)
    assert backoff.backoff_ms(2) == pytest.approx(400 * factor, rel=1e-5)
    # Past the cap the exponent stops growing (Kafka's expMax): max * jitter, at most max.
    assert backoff.backoff_ms(10) == pytest.approx(min(1000 * factor, 1000), rel=1e-5)


@pytest.mark.parametrize("max_ms", [100, 50, 0])
def test_max_not_above_initial_means_a_constant_wait_without_jitter(max_ms):
    backoff = ExponentialBackoff(100, max_ms, random=lambda: 0.0)
    assert [backoff.backoff_ms(n) for n in range(4)] == [100, 100, 100, 100]
