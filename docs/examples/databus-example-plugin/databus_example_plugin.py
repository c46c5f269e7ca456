"""An example third-party databus plugin (see docs/plugins.md).

* ``by_tenant`` partitioner: keys look like ``TENANT:ID``; every key of one tenant goes to
  the same partition (CRC-32 of the tenant name), so a tenant's events stay in order even
  when their ids differ.  ``partitioner.config: {separator: "/"}`` changes the separator.
* A route hook for streams whose name starts with ``example.``: adds a ``databus-stream``
  header carrying the stream name, and drops messages whose value is empty.

Both hooks are factories: they run once per configuration and return plain functions that
the sidecar calls per message.
"""

import zlib

from databus import hookimpl


@hookimpl
def databus_partitioner_names():
    return ["by_tenant"]


@hookimpl
def databus_partitioner(name, config):
    if name != "by_tenant":
        return None
    separator = config.get("separator", ":").encode()
    if not separator:
        raise ValueError("by_tenant: separator must not be empty")

    def partition(topic, key, value, partition_count):
        if key is None:
            return 0
        tenant = key.split(separator, 1)[0]
        return zlib.crc32(tenant) % partition_count

    return partition


@hookimpl
def databus_route(stream, topic, settings):
    if not stream.startswith("example."):
        return None
    tag = ("databus-stream", stream.encode())

    def route(message):
        if not message.value:
            return None  # dropped: reported to the app as delivered with offset -1
        message.headers = [*(message.headers or ()), tag]
        return message

    return route
