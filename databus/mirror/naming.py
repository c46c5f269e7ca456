"""Which source topics a mirror copies, and their names on the target (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from databus.mirror.config import MirrorConfig


@dataclass(frozen=True)
class TopicNaming:
    topics: frozenset[str]
    regex: re.Pattern | None
    exclude: tuple[re.Pattern, ...]
    template: str
    source: str
    region: str
    target: str
    internal: frozenset[str]

    @classmethod
    def from_config(cls, mirror: MirrorConfig, source_region: str | None) -> TopicNaming:
        return cls(
            topics=frozenset(mirror.topics),
            regex=re.compile(mirror.topics_regex) if mirror.topics_regex is not None else None,
            exclude=tuple(re.compile(p) for p in mirror.topics_exclude),
            template=mirror.rename,
            source=mirror.source,
            region=source_region or "",
            target=mirror.target,
            internal=frozenset({mirror.offset_syncs_topic}),
        )

    def target_topic(self, topic: str) -> str:
        return self.template.format(source=self.source, region=self.region, topic=topic)

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` (a source topic) is mirrored."""
        if topic.startswith("__") or topic in self.internal:
            return False
        if any(p.fullmatch(topic) for p in self.exclude):
            return False
        if topic not in self.topics and not (self.regex and self.regex.fullmatch(topic)):
            return False
        return not self.is_copy_from_target(topic)

    def is_copy_from_target(self, topic: str) -> bool:
        """A topic that this naming would give to the *target's* topics when they are
        mirrored the other way (``B.orders`` on A, for a mirror A->B with
        ``{source}.{topic}``): copying it back would only bring B's own records home, so it is
        skipped (MirrorMaker 2's cycle check by name).  With ``{topic}`` names are kept and
        the provenance header alone prevents loops."""
        if "{source}" not in self.template:
            return False
        prefix, _, suffix = self.template.partition("{topic}")
        prefix = prefix.replace("{source}", self.target)
        suffix = suffix.replace("{source}", self.target)
        if "{" in prefix + suffix:  # {region} of the other side is unknown here
            return False
        return (topic.startswith(prefix) and topic.endswith(suffix)
                and len(topic) > len(prefix) + len(suffix))

    def select(self, topics) -> list[str]:
        return sorted(t for t in topics if self.matches(t))
