"""The ``lanes:`` section of sidecar.yaml (docs/lanes.md); its rules are the registry's
pure core, databus/lanes/model.py.  databus/config.py assembles it into DatabusConfig;
neither module imports databus.config (the lanes command does)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from databus.config_base import Model as _Model
from databus.lanes.model import check_template


class LanesConfig(_Model):
    """Swimlanes (docs/lanes.md): a message whose lane header names a live lane goes to that
    lane's topic instead of the stream's topic."""

    cluster: str | None = Field(
        None, description="Cluster holding the lane registry, by the rules of a stream's "
        "`cluster`. Lanes apply to the streams sent to this cluster.",
    )
    header: str = Field(
        "databus-lane", description="Header carrying a message's lane (what "
        "`Client.send(..., lane=...)` sets).",
    )
    topic: str = Field(
        "{topic}.lane.{lane}", description="Lane topic name template: `{topic}` (the "
        "stream's topic) and `{lane}`; created on first use with the lane's partitions and "
        "retention.",
    )
    unknown: Literal["main", "reject"] = Field(
        "main", description="A message of an unknown or expired lane: `main` sends it to the "
        "stream's topic (header kept); `reject` fails it (the app's future raises "
        "PluginFailedError naming the lane).",
    )
    registry_topic: str = Field(
        "databus-lanes", alias="registry.topic",
        description="Compacted topic (one partition) holding the lanes, their consumers' "
        "heartbeats and expiry claims; shared by every sidecar and `databus lanes` (keep it "
        "out of mirrors: each region has its own lanes).",
    )
    expiry_check_ms: int = Field(
        1000, alias="expiry.check.ms", gt=0,
        description="How often the sidecar looks for expired lanes to clean up (their topics "
        "deleted; exactly one sidecar does it).",
    )

    @field_validator("topic")
    @classmethod
    def _template(cls, v: str) -> str:
        return check_template(v)
