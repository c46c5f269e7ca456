"""Per-lane figures on the sidecar's /metrics (plain integers bumped by the route function,
turned into families at scrape time, as the sidecar's own metrics are)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from databus.lanes.registry import now_ms

from .service import counters, services


class LaneCollector:
    def describe(self):
        return []

    def collect(self):
        counts = counters()
        if not counts.enabled:  # lanes are off (in the configuration in use)
            return
        messages = CounterMetricFamily(
            "databus_sidecar_lane_messages",
            "Messages with a lane header, by stream, lane and outcome (routed: to the lane's "
            "topic; fallback: lane unknown or expired, sent to the main topic; rejected)",
            labels=["stream", "lane", "outcome"],
        )
        live = GaugeMetricFamily("databus_sidecar_lanes_live", "Live lanes in the registry")
        cleaned = CounterMetricFamily(
            "databus_sidecar_lanes_cleaned", "Expired lanes this sidecar cleaned up")
        for (stream, lane), stats in counts.stats.items():
            for outcome in ("routed", "fallback", "rejected"):
                messages.add_metric([stream, lane, outcome], getattr(stats, outcome))
        now = now_ms()
        n_live = max((sum(1 for lane in service.registry.lanes.values() if lane.live(now))
                      for service in services()), default=0)
        n_cleaned = counts.cleaned
        live.add_metric([], n_live)
        cleaned.add_metric([], n_cleaned)
        yield messages
        yield live
        yield cleaned
