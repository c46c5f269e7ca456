"""Apps' subscriptions: ``core`` (a member's state, sans I/O) and ``service`` (the group
members, one per (stream, group))."""
