"""Topic metadata persisted in the data directory: name, stable topic id, partition count and
config overrides.

* ``<data_dir>/topic-metadata.json`` lists every topic (written atomically on each change);
  it is the source of truth for which topics exist.
* ``<data_dir>/<topic>-<n>/partition.metadata`` holds the topic id in Kafka's format
  (``version: 0`` / ``topic_id: <base64url uuid>``), so a partition directory names its topic
  even on its own; if topic-metadata.json is lost, the topics are rebuilt from these files
  (config overrides are then lost, and that is reported).

Topic names follow Kafka's rules: [a-zA-Z0-9._-], at most 249 characters, not "." or "..".
"""

from __future__ import annotations

import base64
import json
import os
import re
import uuid
from dataclasses import dataclass, field

from .durable import atomic_write
from .errors import InvalidTopicError, StorageError

TOPIC_METADATA_FILE = "topic-metadata.json"
PARTITION_METADATA_FILE = "partition.metadata"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    config: dict[str, str] = field(default_factory=dict)  # overrides, Kafka names


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long, the maximum is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} contains characters other than ASCII letters, digits, "
            "'.', '_' and '-'"
        )


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's textual Uuid: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    m = _PARTITION_DIR.match(name)
    if not m:
        return None
    return m.group(1), int(m.group(2))


def write_partition_metadata(directory: str, topic_id: uuid.UUID) -> None:
    text = f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n"
    atomic_write(os.path.join(directory, PARTITION_METADATA_FILE), text.encode())


def read_partition_metadata(directory: str) -> uuid.UUID | None:
    try:
        with open(os.path.join(directory, PARTITION_METADATA_FILE), encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        return decode_topic_id(fields["topic_id"].strip())
    except (OSError, KeyError, ValueError):
        return None


def load_topics(data_dir: str) -> dict[str, TopicInfo] | None:
    """The persisted topics, or None if the file does not exist."""
    path = os.path.join(data_dir, TOPIC_METADATA_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(f"{path} is not valid JSON ({exc}); restore it or remove it to "
                           "rebuild the topics from the partition directories") from exc
    topics = {}
    try:
        for entry in doc["topics"]:
            topics[entry["name"]] = TopicInfo(
                name=entry["name"],
                topic_id=decode_topic_id(entry["topic_id"]),
                partitions=int(entry["partitions"]),
                config=dict(entry.get("config", {})),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"{path} has a malformed topic entry ({exc!r})") from exc
    return topics


def save_topics(data_dir: str, topics: dict[str, TopicInfo]) -> None:
    doc = {
        "version": 1,
        "topics": [
            {"name": t.name, "topic_id": encode_topic_id(t.topic_id),
             "partitions": t.partitions, "config": dict(sorted(t.config.items()))}
            for t in sorted(topics.values(), key=lambda t: t.name)
        ],
    }
    atomic_write(os.path.join(data_dir, TOPIC_METADATA_FILE),
                 (json.dumps(doc, indent=1) + "\n").encode())
