"""The sidecar service: its root nursery, the ingress listeners, and applying configs.

``Sidecar.serve(task_status)`` owns everything it starts: the producer pool, the Unix socket
(and optional loopback TCP) listener, the metrics server, the reload watcher and plugin
tasks.  ``request_stop()`` drains it: stop accepting connections, let every queued message
reach upstream (up to ``shutdown_timeout_ms``), write the last reports, close.

``apply(config)`` is hot reload: build the new routing table beside the old one (any failure
rejects the config and keeps the old one), then swap it in through the reload gate (gate.py:
no frame is routed while the old table's frames finish being handed over), flush and retire
the producers the new table no longer uses (so per-key order holds across a reload: the old
producer's messages are acknowledged before the new producer sends), and open the gate.
Connections and queued messages are untouched.
"""

from __future__ import annotations

import logging
import os
import socket as stdlib_socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

import databus
from databus.config import EMBEDDED_CLUSTER, ConfigError, DatabusConfig, group_id
from databus.plugins import PluginError, PluginManager, get_plugin_manager
from databus.protocol import sidecar_wire as wire
from databus.protocol.addresses import parse_host_port
from databus.service.http import serve_metrics
from databus.service.limits import ConnectionLimits, RequestMemory
from databus.startup import StartupError, make_dirs, open_tcp_listeners, reason

from .config_diff import RELOADABLE_SIDECAR, diff_configs
from .consume.service import ConsumeCollector, ConsumeService
from .half.service import Checkers
from .metrics import SidecarMetrics
from .produce.access import TokenCheck
from .produce.budget import ByteBudget
from .produce.gate import ReloadGate
from .produce.ingress import Connection
from .produce.router import RoutingTable
from .produce.upstream import ProducerPool, default_producer_factory

log = logging.getLogger("databus.sidecar")

@dataclass(frozen=True)
class Addresses:
    socket: str
    tcp: tuple[str, int] | None
    metrics: tuple[str, int] | None


@dataclass(frozen=True)
class _Bound:
    app: list  # the Unix socket listener, then the TCP ingress ones
    metrics: list
    addresses: Addresses


class Companion(Protocol):
    """A service that runs in the sidecar's root nursery and follows its config (what
    ``databus up`` adds beside the ingress: sinks, mirrors — see databus/up/host.py).  The
    sidecar knows only this shape, never the parts behind it."""

    collector: Any  # registered in the sidecar's /metrics registry (None: nothing to add)

    async def serve(self, config: DatabusConfig, *, task_status=trio.TASK_STATUS_IGNORED
                    ) -> None: ...

    def prepare(self, config: DatabusConfig) -> Any:
        """Check a reloaded config (raise ConfigError/ValueError/PluginError/KeyError to
        reject it, before anything changed); what it returns is given to ``apply``."""

    async def apply(self, prepared: Any) -> None: ...

    async def aclose(self) -> None:
        """Stop gracefully (at drain: flush, commit, leave the groups)."""


# A companion is made with the sidecar it serves (for its bootstrap_map and settings).
CompanionFactory = Callable[["Sidecar"], Companion]


class Sidecar:
    def __init__(
        self,
        config: DatabusConfig,
        *,
        plugin_manager: PluginManager | None = None,
        embedded_bootstrap: str | None = None,
        config_path: str | os.PathLike | None = None,
        producer_factory: Callable[..., Any] = default_producer_factory,
        config_overrides: Callable[[DatabusConfig], DatabusConfig] | None = None,
        companions: Sequence[CompanionFactory] = (),
    ) -> None:
        self.config = config
        # The config as last asked for (the file plus the command line's overrides, which
        # ``config_overrides`` applies again to each reloaded file): a reload is compared
        # with it, so a --socket flag is no change and a change is reported once.
        self.requested = config
        self._config_overrides = config_overrides
        self.pm = plugin_manager or get_plugin_manager()
        self.embedded_bootstrap = embedded_bootstrap
        self.config_path = Path(config_path) if config_path else None
        self._producer_factory = producer_factory
        self.metrics = SidecarMetrics()
        self.budget = ByteBudget(config.sidecar.buffer_memory)
        self.metrics.buffer_bytes = lambda: self.budget.used
        self.metrics.buffer_limit = self.budget.limit
        # The routing table in use lives in the gate (None until serve() has built one).
        self.gate: ReloadGate[RoutingTable | None] = ReloadGate(None)
        self.pool: ProducerPool | None = None
        self.addresses: Addresses | None = None
        self.stopping = False
        self._reload_lock = trio.Lock()
        self._stop = trio.Event()
        self._connections: set[Connection] = set()
        self._nursery: trio.Nursery | None = None
        self._bound: _Bound | None = None
        self._conn_ids = 0
        self.consume = ConsumeService(self)  # apps' subscriptions: one member per (stream, group)
        self.metrics.registry.register(ConsumeCollector(self.consume))
        self.delay_services: list = []  # one per cluster with delay.enabled (delay.py)
        self.half_services: list = []  # one per cluster with transactions.enabled
        self.checkers = Checkers()  # apps answering check-backs (half/service.py)
        # Services run beside the ingress and reloaded with it (databus up's sinks, mirrors).
        self.companions = [make(self) for make in companions]
        for companion in self.companions:
            if companion.collector is not None:
                self.metrics.registry.register(companion.collector)

    @property
    def table(self) -> RoutingTable | None:
        """The routing table in use."""
        return self.gate.current

    # --- what connections need from the service -------------------------------------------

    def authorize_app(self, token):
        """The access of the app presenting ``token`` (sidecar.tokens, in force now); None
        when no tokens are configured; WireError(UNAUTHORIZED) for a missing/unknown one."""
        tokens = self.config.sidecar.resolved_tokens()
        if not tokens:
            return None
        return TokenCheck(tokens)(token)

    def hello_reply(self, version: int) -> dict:
        max_block = self.config.producer_config(self.config.producer).max_block_ms
        return wire.hello_reply(
            f"databus/{databus.__version__}", self.config.sidecar.max_frame_bytes, max_block,
            version,
        )

    def kick_producers(self) -> None:
        """An app asked to flush: send what the producers hold without waiting for linger."""
        if self._nursery is None or self.table is None:
            return
        for handle in self.table.handles():
            self._nursery.start_soon(_quiet_flush, handle.producer)

    # --- config -----------------------------------------------------------------------------

    def bootstrap_map(self, config: DatabusConfig) -> dict[str, str]:
        out = {name: c.bootstrap_servers for name, c in config.clusters.items()}
        if not config.clusters:
            if self.embedded_bootstrap is None:
                raise ConfigError(
                    "no upstream cluster: configure `clusters:` in sidecar.yaml, or run "
                    "`databus up`, which starts the built-in broker"
                )
            out[EMBEDDED_CLUSTER] = self.embedded_bootstrap
        return out

    async def apply(self, new: DatabusConfig) -> bool:
        """Hot reload (see the module docstring).  Returns False if ``new`` was rejected."""
        async with self._reload_lock:
            diff = diff_configs(self.requested, new)
            if not diff:
                # e.g. the file watch and SIGHUP both fired for one edit
                log.debug("reload: no change")
                return True
            requested = new
            old = self.config
            new = new.model_copy(update={"sidecar": old.sidecar.model_copy(update={
                name: getattr(new.sidecar, name) for name in RELOADABLE_SIDECAR})})
            assert self.pool is not None and self.table is not None
            before = set(self.pool.handles.values())
            try:
                # Validate everything before anything acts: the companions first (sinks,
                # mirrors: they only make objects), then the routes (their plugins start
                # nothing until the table is live, databus_config_reloaded).
                prepared = [companion.prepare(new) for companion in self.companions]
                table = await RoutingTable.build(
                    new, self.pm, self.pool, self.bootstrap_map(new), self.metrics
                )
            except (ConfigError, ValueError, PluginError, KeyError) as exc:
                log.error("config rejected, keeping the current one: %s", exc)
                self.metrics.reloads_failed += 1
                orphans = set(self.pool.handles.values()) - before
                await self.pool.retire(orphans, timeout=1.0)
                return False
            await self._swap(table)
            self.config, self.requested = new, requested
            for companion, plan in zip(self.companions, prepared, strict=True):
                await companion.apply(plan)
            self.metrics.reloads_ok += 1
            for item in diff.restart:
                log.warning("reload: %s: takes effect only after a restart", item)
            log.info("reload applied: %s", diff.applied_line() or "nothing a reload changes")
            self.pm.notify("databus_config_reloaded", old=old, new=new)
            return True

    async def _swap(self, table: RoutingTable) -> None:
        assert self.pool is not None and self.table is not None
        async with self.gate.swapping():
            old_table, self.gate.current = self.gate.current, table
            unused = old_table.handles() - table.handles()
            if unused:
                await self.pool.retire(
                    unused, timeout=self.config.sidecar.shutdown_timeout_ms / 1000
                )

    async def reload_from_file(self) -> bool:
        from databus.config import load_config

        if self.config_path is None:
            return False
        try:
            new = load_config(self.config_path)
            if self._config_overrides is not None:
                new = self._config_overrides(new)
        except ConfigError as exc:
            log.error("config rejected, keeping the current one: %s", exc)
            self.metrics.reloads_failed += 1
            return False
        return await self.apply(new)

    # --- lifecycle --------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def healthy(self) -> tuple[bool, str]:
        if self.table is None:
            return False, "starting"
        if self.stopping:
            return False, "stopping"
        return True, "ok"

    async def bind(self) -> Addresses:
        """Bind the app socket, the loopback TCP ingress and the metrics port, or raise
        StartupError naming the setting at fault.  ``serve`` binds if this was not called;
        ``databus up`` calls it before starting its broker, so that a socket or port it
        cannot have is reported before the broker writes anything to disk."""
        if self._bound is not None:
            return self._bound.addresses
        settings = self.config.sidecar
        # A second sidecar on the same path fails here, before touching anything.
        app = [await _unix_listener(settings.socket, settings.socket_mode_int,
                                    settings.socket_group)]
        metrics: list[trio.SocketListener] = []
        try:
            tcp = None
            if settings.tcp_listen:
                host, port = parse_host_port(settings.tcp_listen, allow_port_zero=True)
                tcp_listeners = await open_tcp_listeners(
                    host, port, setting="sidecar.tcp_listen"
                )
                app += tcp_listeners
                tcp = tcp_listeners[0].socket.getsockname()[:2]
            metrics_addr = None
            if settings.metrics_listen:
                host, port = parse_host_port(settings.metrics_listen, allow_port_zero=True)
                metrics = await open_tcp_listeners(host, port, setting="sidecar.metrics_listen")
                metrics_addr = metrics[0].socket.getsockname()[:2]
        except BaseException:
            with trio.CancelScope(shield=True):
                for listener in app + metrics:
                    await trio.aclose_forcefully(listener)
            _unlink_socket(settings.socket)
            raise
        self._bound = _Bound(app, metrics, Addresses(settings.socket, tcp, metrics_addr))
        return self._bound.addresses

    async def release(self) -> None:
        """Close what ``bind`` opened and remove the app socket (done by ``serve`` on exit)."""
        bound, self._bound = self._bound, None
        if bound is None:
            return
        with trio.CancelScope(shield=True):
            for listener in bound.app + bound.metrics:
                await trio.aclose_forcefully(listener)
        _unlink_socket(bound.addresses.socket)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        settings = self.config.sidecar
        await self.bind()
        assert self._bound is not None
        try:
            async with trio.open_nursery() as root:
                self._nursery = root
                self.pool = ProducerPool(
                    root, self.pm, settings.buffer_memory, self._producer_factory
                )
                self.metrics.producer_stats = self.pool.statistics
                try:
                    self.gate.current = await RoutingTable.build(
                        self.config, self.pm, self.pool, self.bootstrap_map(self.config),
                        self.metrics,
                    )
                    for companion in self.companions:
                        await root.start(companion.serve, self.config)
                    self.consume.bind(root)
                    await self._start_delay(root)
                    await self._start_half(root)
                    async with trio.open_nursery() as ingress:
                        self._ingress = ingress
                        await self._serve_ingress(ingress, self._bound, task_status)
                finally:
                    with trio.CancelScope(shield=True):
                        await self.consume.aclose(settings.shutdown_timeout_ms / 1000)
                        for companion in self.companions:
                            await companion.aclose()  # flush, commit, leave the groups
                        with trio.move_on_after(settings.shutdown_timeout_ms / 1000):
                            for service in self.delay_services + self.half_services:
                                await service.stop()
                        with trio.move_on_after(settings.shutdown_timeout_ms / 1000):
                            await self.pool.close_all(
                                timeout=settings.shutdown_timeout_ms / 1000
                            )
                    root.cancel_scope.cancel()
        finally:
            await self.release()

    async def _start_delay(self, nursery) -> None:
        """The delay service of each cluster ``delay:`` names (docs/delayed.md); a reload
        does not start or stop it (that needs a restart)."""
        from .delay.service import DelayService

        bootstrap = self.bootstrap_map(self.config)
        settings = self.config.delay
        self.delay_services = []
        for cluster in self.config.delay_clusters():
            service = DelayService(cluster, bootstrap[cluster], group_id=settings.group_id,
                                   consumer=settings.consumer, producer=settings.producer)
            self.delay_services.append(await nursery.start(service.run))

    async def _start_half(self, nursery) -> None:
        """The half-message service of each cluster ``transactions:`` names (a reload does
        not start or stop it)."""
        from .half.service import HalfService

        bootstrap = self.bootstrap_map(self.config)
        settings = self.config.transactions
        for cluster in self.config.transaction_clusters():
            service = HalfService(cluster, bootstrap[cluster], self.checkers,
                                  group_id=settings.group_id, check_ms=settings.check_ms,
                                  max_checks=settings.max_checks, consumer=settings.consumer,
                                  producer=settings.producer)
            self.half_services.append(await nursery.start(service.run))

    async def _serve_ingress(self, ingress, bound: _Bound, task_status) -> None:
        if bound.metrics:
            ingress.start_soon(serve_metrics, self.metrics, bound.metrics, self.healthy,
                               lambda: self.config, self.embedded_bootstrap, self.pm)
        from databus.service.reload import watch_config

        # Armed before "databus is up"; without a file too, so that SIGHUP never kills it.
        await ingress.start(watch_config, self)
        accept_scope = trio.CancelScope()
        ingress.start_soon(self._accept, bound.app, accept_scope)
        self.addresses = bound.addresses
        self.pm.notify(
            "databus_sidecar_started", config=self.config,
            spawn=lambda fn, *args: ingress.start_soon(fn, *args), metrics=self.metrics.registry,
        )
        task_status.started(self.addresses)
        await self._stop.wait()
        accept_scope.cancel()
        await self._drain()
        ingress.cancel_scope.cancel()

    async def _accept(self, listeners, scope: trio.CancelScope) -> None:
        settings = self.config.sidecar  # these three take effect at the next restart
        memory = RequestMemory(settings.queued_max_frame_bytes)
        limits = ConnectionLimits(settings.max_connections, 2**31 - 1)

        async def handle(stream) -> None:
            self._conn_ids += 1
            name = f"conn-{self._conn_ids}"
            if not limits.admit("app", name):
                await trio.aclose_forcefully(stream)
                return
            conn = Connection(
                stream, name,
                max_frame_bytes=self.config.sidecar.max_frame_bytes,
                hello_reply=self.hello_reply, budget=self.budget, gate=self.gate,
                metrics=self.metrics, kick=self.kick_producers, consume=self.consume,
                checkers=self.checkers, authorize=self.authorize_app,
                memory=memory, idle_ms=settings.connections_max_idle_ms,
            )
            self._connections.add(conn)
            try:
                await conn.run()
            finally:
                limits.release("app")
                self._connections.discard(conn)

        # Connections run in the ingress nursery, not serve_listeners' own: cancelling
        # ``scope`` stops accepting while established connections keep draining.
        ingress = self._ingress
        with scope:
            await trio.serve_listeners(handle, listeners, handler_nursery=ingress)

    async def _drain(self) -> None:
        log.info("stopping: draining queued messages")
        self.stopping = True
        self.gate.stop()
        self.pm.notify("databus_sidecar_stopping", config=self.config)
        timeout = self.config.sidecar.shutdown_timeout_ms / 1000
        assert self.pool is not None
        await self.pool.close_all(timeout=timeout)
        # Give writers a moment to put the last reports on the wire.
        with trio.move_on_after(1.0):
            while any(conn.session.has_output for conn in self._connections):
                await trio.sleep(0.01)


async def _quiet_flush(producer) -> None:
    try:
        await producer.flush()
    except Exception:
        pass  # each message's own report carries its error


async def _unix_listener(path: str, mode: int, group: str | None = None
                         ) -> trio.SocketListener:
    """Bind the app socket: refuse if a live sidecar owns it, replace a stale file.  The
    mode (and group) are set before ``listen``, so no app connects through looser ones."""
    make_dirs(Path(path).parent, "directory for the app socket", setting="sidecar.socket")
    if os.path.exists(path):
        probe = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
        try:
            await probe.connect(path)
        except OSError:
            os.unlink(path)  # nobody listens: a leftover of a killed sidecar
        else:
            raise StartupError(f"another sidecar is listening on {path} (sidecar.socket)")
        finally:
            probe.close()
    sock = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    try:
        await sock.bind(path)
        if group is not None:
            os.chown(path, -1, group_id(group))
        os.chmod(path, mode)
        sock.listen(512)
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot create the app socket {path} (sidecar.socket): {reason(exc)}"
        ) from None
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


def _unlink_socket(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
