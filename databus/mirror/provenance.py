"""The provenance header of a mirrored record, and the loop check (pure).

Every record a mirror writes gets one more header::

    databus.mirror.provenance = "<source cluster>/<source region>/<source topic>/<partition>/<offset>"

ASCII, so it reads plainly in ``kcat``/``databus consume`` output.  Cluster names, regions
and topic names cannot contain ``/`` (the config and Kafka's topic rules forbid it).  A record
copied twice (A -> B -> C) carries one header per hop, oldest first.  A mirror never copies a
record whose provenance names its target cluster: with A <-> B mirrored both ways under the
same topic names, B's copy of an A record is not sent back to A.
"""

from __future__ import annotations

from typing import NamedTuple

HEADER = "databus.mirror.provenance"


class Provenance(NamedTuple):
    cluster: str
    region: str
    topic: str
    partition: int
    offset: int


def encode(cluster: str, region: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{cluster}/{region}/{topic}/{partition}/{offset}".encode()


def decode(value: bytes | None) -> Provenance:
    if value is None:
        raise ValueError("provenance header without a value")
    parts = value.decode("ascii", "replace").split("/")
    if len(parts) != 5:
        raise ValueError(f"malformed provenance header {value!r}")
    try:
        return Provenance(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4]))
    except ValueError:
        raise ValueError(f"malformed provenance header {value!r}") from None


def prefix(cluster: str) -> bytes:
    """What a provenance value written by a mirror reading ``cluster`` starts with."""
    return cluster.encode() + b"/"


def came_from(headers, cluster_prefix: bytes) -> bool:
    """Whether any provenance header in ``headers`` names the cluster of ``cluster_prefix``
    (``prefix(name)``): the loop check, on the per-record path, so no full decode."""
    for key, value in headers:
        if key == HEADER and value is not None and value.startswith(cluster_prefix):
            return True
    return False


def last_from(headers, cluster_prefix: bytes) -> Provenance | None:
    """The newest provenance header naming ``cluster_prefix``'s cluster, decoded."""
    found = None
    for key, value in headers:
        if key == HEADER and value is not None and value.startswith(cluster_prefix):
            found = value
    return decode(found) if found is not None else None
