"""The "databus" PySpark data source (import name ``databus_spark``); built in a later issue."""
