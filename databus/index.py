"""Indexes from Python: the messages of an index whose field has a value, newest first
(docs/index.md).  The index plugin does the work (``databus_plugins.index``).

::

    import databus.index
    messages = databus.index.query("sidecar.yaml", "orders", "user_id", "42", limit=10)
"""

from __future__ import annotations

from databus_plugins.index.query import IndexQueryError, query

__all__ = ["IndexQueryError", "query"]
