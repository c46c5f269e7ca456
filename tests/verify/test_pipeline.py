"""``databus verify --workload pipeline``: the SDK's sends through ``databus up`` (sidecar
and built-in broker) under kill -9 of the up process, read back from its broker."""

from __future__ import annotations

from .test_queue import verify


def test_pipeline_sdk_through_databus_up_killed_is_valid(tmp_path):
    # the SDK's sends through `databus up` (sidecar + built-in broker), the up process
    # killed -9 and restarted: every acknowledged send read back from the broker, once
    code, out, ops = verify(tmp_path, "--workload", "pipeline", "--time", "8", "--seed", "4",
                            "--faults", "kill", "--recover", "3")
    assert code == 0, out
    assert "pipeline workload" in out and "verdict: VALID (seed 4" in out
    assert any(op["f"] == "nemesis" and op["type"] == "ok" and op["fault"] == "end: kill healed"
               for op in ops)
    acked = {w[1] for op in ops if op["f"] == "send" and op["type"] == "ok" for w in op["writes"]}
    read = {r[2] for op in ops if op["f"] == "poll" and op["type"] == "ok" for r in op["reads"]}
    assert acked and acked <= read
    assert {op["process"] for op in ops if op["f"] == "send"} == {"sdk0", "sdk1"}


def test_pipeline_stages_mirror_and_parquet_sink_killed_hold_each_value_once(tmp_path):
    # --stages: the sidecar, an exactly-once mirror (to a second broker) and a Parquet sink
    # in one `databus up`, killed -9 and restarted: the mirror's target (read_committed) and
    # the sink's files each hold every acknowledged value exactly once
    code, out, ops = verify(tmp_path, "--workload", "pipeline", "--stages", "--time", "8",
                            "--seed", "4", "--faults", "kill", "--recover", "3")
    assert code == 0, out
    assert "verdict: VALID (seed 4" in out and "stages: VALID" in out
    # each stage's copy went through the checker: its own verdict, every class checked
    for stage in ("mirror (read_committed on the target)", "parquet sink (its files)"):
        text = out[out.index(f"stage {stage}: "):]
        text = text[: text.index("stage verdict: ") + len("stage verdict: VALID")]
        assert text.endswith("stage verdict: VALID"), text
        assert "0 acknowledged writes unseen" in text, text
        for line in text.splitlines():
            if line.strip().startswith(("lost-write", "duplicate", "aborted-read")):
                assert line.split()[1] == "ok", line
    assert any(op["f"] == "nemesis" and op["fault"] == "end: kill healed" for op in ops
               if op["type"] == "ok")


def test_pipeline_stages_catch_an_at_least_once_mirrors_duplicates(tmp_path):
    # the same pipeline with the mirror at least once (exactly.once: false): a kill -9 of it
    # copies again what it had not recorded, and the mirror stage says so with examples
    code, out, _ops = verify(tmp_path, "--workload", "pipeline", "--stages", "--unsafe",
                             "mirror-at-least-once", "--time", "12", "--seed", "5", "--rate",
                             "1000", "--faults", "kill", "--recover", "3")
    assert code == 1, out
    mirror = out[out.index("stage mirror (read_committed on the target): "):]
    mirror = mirror[: mirror.index("stage verdict: ")]
    duplicate = next(x for x in mirror.splitlines() if x.strip().startswith("duplicate"))
    assert "FOUND" in duplicate, mirror
    assert "e.g. value sdk" in mirror, mirror          # an example: the value and places
    lost = next(x for x in mirror.splitlines() if x.strip().startswith("lost-write"))
    assert lost.split()[1] == "ok", mirror
    assert "stages: INVALID" in out
