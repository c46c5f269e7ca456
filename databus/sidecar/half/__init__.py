"""Half messages, local transactions with check-backs: ``core`` (the tracker, sans I/O)
and ``service`` (the group service per cluster, and the apps answering check-backs)."""
