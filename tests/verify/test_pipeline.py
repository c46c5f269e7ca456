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
