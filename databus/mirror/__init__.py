"""Cross-region mirror: copy topics from one Kafka cluster to another (docs/mirror.md).

The pure core, tested without trio or sockets:

* ``naming``      which source topics a mirror copies and what they are called on the target;
* ``provenance``  the header every mirrored record carries, and the loop check;
* ``progress``    offset-sync records (the compacted progress topic on the target) and the
                  per-partition bookkeeping that decides what may be written there;
* ``translate``   source offset -> target offset (group failover), conservative.

The I/O shell: ``engine`` (one mirror: consume, produce, progress, topic discovery, group
offset sync), ``supervisor`` (run a config's mirrors, apply a new config), ``metrics``,
``command`` (``databus mirror``).
"""
