"""The built-in ``parquet`` sink: topics exported as Parquet files, exactly once.

::

    sinks:
      orders-export:
        plugin: parquet
        topics: [orders]
        config: {path: /srv/export, format: json, flush.size: 100000}

Registered through the ``databus`` entry-point group (``parquet =
"databus_plugins.parquet"``) like any third-party plugin; needs pyarrow (``pip install
databus[parquet]``).  Modules: ``layout`` (pure: options, names, Hive directories, rolling),
``decode`` (records -> Arrow), ``registry`` (columns from a schema registry subject, values in Confluent's wire format), ``target`` (local or filesystem-URL writes), ``sink`` (the
sink object).  Users' documentation: docs/parquet.md.
"""

from __future__ import annotations

from databus import hookimpl

NAME = "parquet"


@hookimpl
def databus_sink_names():
    return [NAME]


@hookimpl
def databus_sink(name, config, schema_registry_url):
    if name != NAME:
        return None
    from . import layout

    options = layout.parse_options(config, schema_registry_url)
    try:
        from .sink import ParquetSink
    except ImportError as exc:  # pyarrow is an extra
        raise ValueError(f"parquet: needs pyarrow (pip install 'databus[parquet]'): {exc}") \
            from None
    return ParquetSink(options)
