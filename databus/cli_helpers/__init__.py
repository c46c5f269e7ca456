"""What every command line shares (the tools, the parts' commands, the benchmarks):
``table`` (rich tables, plain when piped) and ``options`` (Kafka's option spellings:
--bootstrap-server, -X/--command-config, --json).  Low: it imports no part and no tool, so
any part's command may use it (no part imports databus.tools)."""
