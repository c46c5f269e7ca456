"""``<data_dir>/meta.properties``: the identity of the cluster a data directory belongs to.

Kafka's format (a Java properties file): ``version=1``, ``cluster.id=<22-character
URL-safe base64 UUID>``, ``node.id=<n>``.  It is created on a directory's first start and
read on every later one, so the cluster id survives restarts.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from .durable import atomic_write

META_PROPERTIES = "meta.properties"


def new_cluster_id() -> str:
    """Kafka's format: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_meta_properties(data_dir: str | os.PathLike) -> dict[str, str]:
    """The key=value pairs of meta.properties ({} when it does not exist)."""
    try:
        text = (Path(data_dir) / META_PROPERTIES).read_text()
    except FileNotFoundError:
        return {}
    properties = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            properties[key.strip()] = value.strip()
    return properties


def load_or_create_cluster_id(data_dir: str | os.PathLike, node_id: int) -> str:
    """``cluster.id`` from meta.properties, writing a new file (durably) if it has none."""
    cluster_id = read_meta_properties(data_dir).get("cluster.id")
    if cluster_id:
        return cluster_id
    cluster_id = new_cluster_id()
    atomic_write(Path(data_dir) / META_PROPERTIES,
                 f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode())
    return cluster_id
