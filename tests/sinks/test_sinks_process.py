"""The sinks runtime as users meet it: ``databus sinks`` reloads its file (a sink added, a bad
one rejected), a plugin that raises is reported and restarted while everything else keeps
serving; and the sidecar's own reload starts and stops sinks."""

from __future__ import annotations

import textwrap
import urllib.request

import trio

from databus.config import parse_config

from .harness import (
    Service,
    assert_exactly_once,
    exported_rows,
    parquet_sink,
    produce_json,
    sinks_config,
    wait_for,
)

FAULTY = textwrap.dedent('''
    from databus import hookimpl

    @hookimpl
    def databus_sink_names():
        return ["faulty"]

    @hookimpl
    def databus_sink(name, config):
        if name != "faulty":
            return None

        class Faulty:
            async def open(self, tp, committed):
                pass

            async def write(self, tp, records):
                raise RuntimeError("disk on fire")

            async def flush(self, partitions, force):
                return {}

            async def close(self, partitions):
                pass

            async def aclose(self):
                pass

        return Faulty()
''')



def installed_faulty_plugin(tmp_path):
    """A third-party plugin installed the way pip leaves one: a module and a dist-info
    directory with its entry point, on the path."""
    site = tmp_path / "site"
    (site / "faulty_sink-0.1.dist-info").mkdir(parents=True)
    (site / "faulty_sink.py").write_text(FAULTY)
    (site / "faulty_sink-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: faulty-sink\nVersion: 0.1\n")
    (site / "faulty_sink-0.1.dist-info" / "entry_points.txt").write_text(
        "[databus]\nfaulty = faulty_sink\n")
    return {"PYTHONPATH": str(site)}


def test_reload_adds_a_sink_and_a_raising_plugin_is_reported_while_all_else_serves(
    broker, tmp_path
):
    first, second = tmp_path / "first", tmp_path / "second"
    flush = {"flush.size": 250}  # 1000 records over 4 partitions: all durable without a stop
    config = sinks_config(broker, {"first": parquet_sink("r1", first, **flush)})
    service = Service(tmp_path, "sinks", config, env=installed_faulty_plugin(tmp_path))
    try:
        service.start()
        produce_json(broker.bootstrap, "r1", range(1000))
        wait_for(lambda: exported_rows(first) == 1000, "first export", timeout=60, log=service.log)

        config["sinks"]["second"] = parquet_sink("r1", second, **flush)
        config["sinks"]["broken"] = {"plugin": "faulty", "topics": "r1"}
        service.reload(config)
        wait_for(lambda: exported_rows(second) == 1000, "the added sink", timeout=60,
                 log=service.log)
        wait_for(lambda: (service.metric("databus_sink_errors_total", sink="broken") or 0) >= 1,
                 "the failure to be counted", timeout=60, log=service.log)
        assert "plugin 'faulty' raised in write: RuntimeError: disk on fire" in service.log()
        assert service.metric("databus_sink_errors_total", sink="first") == 0

        # A config a plugin refuses is rejected whole; the running sinks are untouched.
        bad = {**config, "sinks": {**config["sinks"],
                                   "third": parquet_sink("r1", tmp_path / "x", format="avro")}}
        service.reload(bad)
        wait_for(lambda: "config rejected, keeping the current one" in service.log(),
                 "the rejection", timeout=30, log=service.log)
        assert "format must be one of json, msgpack, raw" in service.log()

        # Still serving: new records reach both working sinks; health is ok.
        produce_json(broker.bootstrap, "r1", range(1000, 2000))
        wait_for(lambda: exported_rows(first) == exported_rows(second) == 2000, "more records",
                 timeout=60, log=service.log)
        with urllib.request.urlopen(service.metrics_url() + "/healthz", timeout=10) as r:
            assert r.status == 200
        assert service.process.poll() is None
        assert service.stop() == 0
    finally:
        service.close()
    assert_exactly_once(first, "r1", range(2000))
    assert_exactly_once(second, "r1", range(2000))
    assert not (tmp_path / "x").exists()


async def test_the_sidecar_starts_sinks_on_reload_and_rejects_an_unknown_plugin(
    broker, tmp_path
):
    from databus.up.host import SinksCompanion, companion
    from tests.sidecar.harness import running_sidecar, short_tmpdir

    out = tmp_path / "export"
    await trio.to_thread.run_sync(produce_json, broker.bootstrap, "side", range(400))
    with short_tmpdir() as sock_dir:
        base = sinks_config(broker, {}, socket=f"{sock_dir}/s.sock")
        async with running_sidecar(parse_config(base)) as sidecar:
            assert companion(sidecar, SinksCompanion).runners == {}
            with_sink = {**base, "sinks": {"side": parquet_sink("side", out, **{
                "flush.size": 100})}}
            assert await sidecar.apply(parse_config(with_sink))
            with trio.fail_after(60):
                while exported_rows(out) < 400:
                    await trio.sleep(0.2)
            unknown = {**with_sink, "sinks": {"side": {"plugin": "nope", "topics": "side"}}}
            assert not await sidecar.apply(parse_config(unknown))
            assert companion(sidecar, SinksCompanion).runners["side"].spec.plugin == "parquet"  # kept
            metrics = sidecar.metrics.render().decode()
            assert 'databus_sink_records_in_total{sink="side"} 400.0' in metrics
            assert await sidecar.apply(parse_config(base))  # removed: stopped gracefully
            assert companion(sidecar, SinksCompanion).runners == {}
    assert_exactly_once(out, "side", range(400))
