"""Delayed messages (docs/delayed.md): ``core`` (the level schedule, sans I/O) and
``service`` (the group service per cluster)."""
