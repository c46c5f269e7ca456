"""Indexes from Python: the messages of an index whose field has a value, newest first
(docs/index.md).  The index plugin does the work (``databus_plugins.index``).

::

    import databus.index
    messages = databus.index.query("sidecar.yaml", "orders", "user_id", "42", limit=10)

    # many queries: one cluster connection and the databases kept open
    with databus.index.Index("sidecar.yaml") as index:
        for user in ("42", "43"):
            messages = index.query("orders", "user_id", user, since=1767225600000)

``status_rows(config, bootstrap)`` (async) gives ``databus index status``'s table
(STATUS_COLUMNS), as the web console shows it; ``index_topics(config, name)`` the topics
an index's row is about.
"""

from __future__ import annotations

from databus_plugins.index.command import STATUS_COLUMNS, index_topics, status_rows
from databus_plugins.index.query import (
    Index,
    IndexQueryError,
    bootstrap_for,
    query,
    query_async,
)

__all__ = ["STATUS_COLUMNS", "Index", "IndexQueryError", "bootstrap_for", "index_topics",
           "query", "query_async", "status_rows"]
