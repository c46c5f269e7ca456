"""What `databus broker` prints when it restarts: one summary line per data dir, recovery
lines only for an unclean stop, and no line twice (a real broker process)."""

from __future__ import annotations

import json
import re
from collections import Counter

from tests.helpers.broker import BrokerProcess

from .test_kafka_spellings import databus, ok

SUMMARY = re.compile(r"data: loaded (\d+) partition\(s\) of (\d+) topic\(s\) in \d+ ms \((.*)\)$")


def test_a_clean_restart_is_one_line_per_data_dir_and_an_unclean_one_names_its_repairs(
        tmp_path):
    with BrokerProcess(tmp_path, log_level="INFO") as broker:
        for name in ("quiet-a", "quiet-b"):
            ok(databus("topics", "create", "--bootstrap-server", broker.bootstrap,
                       "--topic", name, "--partitions", "3"))
        ok(databus("produce", "--bootstrap-server", broker.bootstrap, "--topic", "quiet-a",
                   stdin=b"one\ntwo\n"))

        every = json.loads(ok(databus("topics", "describe", "--bootstrap-server",
                                      broker.bootstrap, "--json")))["topics"]
        expected = (str(sum(t["partition_count"] for t in every)), str(len(every)))
        assert len(every) >= 3  # quiet-a, quiet-b and the internal topics

        broker.restart(clean=True)
        text = broker.log_text()
        restart = text[text.rindex("broker stopped cleanly"):].splitlines()[1:]
        messages = [line.split(" ", 3)[3] for line in restart if line[:2] == "20"]
        summaries = [m for m in messages if SUMMARY.search(m)]
        assert len(summaries) == 1, messages
        partitions, topics, how = SUMMARY.search(summaries[0]).groups()
        assert (partitions, topics, how) == (*expected, "clean shutdown")
        assert not [m for m in messages if "recovery:" in m], messages

        broker.kill9()
        broker.restart()
        text = broker.log_text()
        after_crash = text[text.rindex("no clean-shutdown marker") - 200:].splitlines()
        messages = [line.split(" ", 3)[3] for line in after_crash if line[:2] == "20"]
        summaries = [m for m in messages if SUMMARY.search(m)]
        assert len(summaries) == 1
        assert "after an unclean shutdown" in summaries[0]
        repeated = {m: n for m, n in Counter(m.split(": ", 1)[1] for m in messages
                                             if "recovery:" in m).items() if n > 1}
        assert repeated == {}  # each recovery action is logged once
