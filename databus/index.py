"""Indexes from Python: the messages of an index whose field has a value, newest first
(docs/index.md).  The index plugin does the work (``databus_plugins.index``).

::

    import databus.index
    messages = databus.index.query("sidecar.yaml", "orders", "user_id", "42", limit=10)

``status_rows(config, bootstrap)`` (async) gives ``databus index status``'s table
(STATUS_COLUMNS), as the web console shows it.
"""

from __future__ import annotations

from databus_plugins.index.command import STATUS_COLUMNS, status_rows
from databus_plugins.index.query import IndexQueryError, bootstrap_for, query, query_async

__all__ = ["STATUS_COLUMNS", "IndexQueryError", "bootstrap_for", "query", "query_async",
           "status_rows"]
