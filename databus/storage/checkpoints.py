"""Kafka's checkpoint files.

``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` hold, in Kafka's text
format, a version line (0), a count line, then one ``topic partition offset`` line per
partition.  They are written with ``durable.atomic_write``, so a crash leaves either the old
or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .durable import atomic_write

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file that does not follow the format; the message names file and line."""


def format_checkpoint(entries: Mapping[tuple[str, int], int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode()


def write_checkpoint(path: str | os.PathLike, entries: Mapping[tuple[str, int], int]) -> None:
    atomic_write(path, format_checkpoint(entries))


def parse_checkpoint(text: str, name: str = "checkpoint") -> dict[tuple[str, int], int]:
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{name}: needs a version line and a count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{name}: unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{name}: line 2 is not a count: {lines[1]!r}") from None
    body = [line for line in lines[2:] if line.strip()]
    if len(body) != count:
        raise CheckpointError(f"{name}: announces {count} entries but holds {len(body)}")
    entries: dict[tuple[str, int], int] = {}
    for number, line in enumerate(body, start=3):
        parts = line.split()
        if len(parts) != 3:
            raise CheckpointError(f"{name} line {number}: expected 'topic partition offset'")
        try:
            entries[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise CheckpointError(f"{name} line {number}: partition and offset must be integers") from None
    return entries


def read_checkpoint(path: str | os.PathLike) -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file; {} when it does not exist; CheckpointError if malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    return parse_checkpoint(text, os.path.basename(os.fspath(path)))
