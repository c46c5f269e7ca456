"""The storage benchmark runs end to end (tiny sizes) and cleans up after itself.

It is run through its own module (as ``databus bench storage`` does) rather than through
``databus.cli.main``, which imports every subcommand's module."""

import argparse
import os

from databus.bench import storage
from databus.cli import BENCHMARKS


def test_bench_storage_runs_and_removes_its_directory(tmp_path, capsys):
    assert BENCHMARKS["storage"][0] == "databus.bench.storage"
    parser = argparse.ArgumentParser()
    storage.add_arguments(parser)
    args = parser.parse_args(["--seconds", "0.2", "--size-mb", "4", "--dir", str(tmp_path)])
    assert storage.run(args) == 0
    out = capsys.readouterr().out
    for row in ("append, no fsync", "append, group commit fsync", "sequential read"):
        assert row in out
    assert os.listdir(tmp_path) == []
