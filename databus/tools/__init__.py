"""Command-line tools that operate on local files (no network)."""
