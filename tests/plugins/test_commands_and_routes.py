"""Plugins bring their own commands and HTTP routes by hook (hookspecs.databus_commands,
databus_http_routes): databus names no plugin; the index plugin's `databus index` and
`/index/` arrive this way, and so do a third party's."""

from __future__ import annotations

import urllib.error
import urllib.request

import trio

from databus import cli, hookimpl
from databus.hookspecs import HttpRoute
from tests.sidecar.harness import running_sidecar, sidecar_config


def test_databus_index_comes_from_the_index_plugin():
    assert "index" not in cli.COMMANDS
    module, _help = cli.all_commands()["index"]
    assert module == "databus_plugins.index.command"


class CountPlugin:
    """A third party's route and the service it needs."""

    def __init__(self) -> None:
        self.served = False

    @hookimpl
    def databus_http_routes(self, current_config, bootstrap):
        async def serve(task_status=trio.TASK_STATUS_IGNORED):
            self.served = True
            task_status.started()
            await trio.sleep_forever()

        async def count(path, params):
            streams = ",".join(current_config().streams)
            return "200 OK", "text/plain", f"{path} {params['n'][0]} {streams}".encode()

        return [HttpRoute("/count/", count, serve)]


async def test_a_plugin_serves_its_route_on_the_metrics_listener(sock_dir, mock_cluster):
    plugin = CountPlugin()
    config = sidecar_config(sock_dir, clusters={"mock": {"bootstrap.servers":
                                                         mock_cluster.bootstrap}},
                            streams={"s": {"topic": "t"}})
    async with running_sidecar(config, extra_plugins=[("count", plugin)]) as sidecar:
        host, port = sidecar.addresses.metrics

        def get(path):
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=30) as r:
                return r.status, r.read()

        assert await trio.to_thread.run_sync(get, "/count/x?n=3") == (200, b"/count/x 3 s")
        assert plugin.served
        # the index plugin's route is there too, by the same hook
        try:
            await trio.to_thread.run_sync(get, "/index/nope?a=1")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404 and b"nope" in exc.read()
        else:
            raise AssertionError("/index/nope answered 200")
