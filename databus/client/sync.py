"""A synchronous facade over the trio client, for scripts and Spark executors.

Each facade object starts one daemon thread running ``trio.run``; the trio client lives
there and calls cross over with ``trio.from_thread``.  Blocking methods block only the
calling thread; the client keeps sending, fetching and heartbeating in its own thread.

::

    with SyncProducer("localhost:9092", {"linger.ms": 5}) as p:
        fut = p.send("events", b"value", key=b"k")      # concurrent.futures.Future
        print(fut.result(timeout=10))                    # RecordMetadata
    with SyncConsumer("localhost:9092", {"group.id": "g"}) as c:
        c.subscribe(["events"])
        records = c.poll(1.0)
    with SyncShareConsumer("localhost:9092", {"group.id": "workers",
                                              "share.acknowledgement.mode": "explicit"}) as sc:
        sc.subscribe(["jobs"])
        for record in sc.poll(1.0):
            sc.acknowledge(record)                       # ACCEPT
        sc.commit()
    with SyncAdmin("localhost:9092") as admin:
        admin.create_topics({"events": 3})

Every coroutine method of the wrapped object is available with the same arguments; plain
methods (subscribe, assign, seek, pause, ...) are forwarded into the trio thread too.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import threading
from collections.abc import Callable
from typing import Any

import trio

from .admin import Admin
from .consumer import Consumer
from .producer import DeliveryFuture, Producer
from .reader import RecordReader
from .share_consumer import ShareConsumer


class _TrioThread:
    """Runs ``factory()``'s async context manager in a dedicated trio thread."""

    def __init__(self, factory: Callable[[], Any], name: str) -> None:
        self._factory = factory
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.obj: Any = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:  # reported to the constructor if it failed to start
            self._error = self._error or exc
            self._ready.set()

    async def _run(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        try:
            async with self._factory() as obj:
                self.obj = obj
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            raise

    def call(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` in the trio thread (awaiting it if it is async)."""
        if self.token is None or not self._thread.is_alive():
            raise RuntimeError("the client's trio thread is not running (closed?)")

        async def run():
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return trio.from_thread.run(run, trio_token=self.token)

    def close(self) -> None:
        if self._thread.is_alive() and self.token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
            self._thread.join()


class _SyncFacade:
    _runner: _TrioThread

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._runner.obj, name)
        if not callable(attr):
            return attr

        def forward(*args: Any, **kwargs: Any) -> Any:
            return self._runner.call(attr, *args, **kwargs)

        forward.__name__ = name
        forward.__doc__ = attr.__doc__
        return forward

    def close(self) -> None:
        self._runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SyncProducer(_SyncFacade):
    """Producer for synchronous code; ``send`` returns a concurrent.futures.Future."""

    def __init__(self, bootstrap_servers, config=None, *, partitioner=None) -> None:
        self._runner = _TrioThread(
            lambda: Producer(bootstrap_servers, config, partitioner=partitioner), "databus-producer"
        )

    def send(self, topic: str, value, key=None, headers=None, partition=None,
             timestamp_ms=None) -> concurrent.futures.Future:
        """Queue a record (blocks up to max.block.ms for buffer space); the Future resolves
        to RecordMetadata or raises the delivery error."""
        result: concurrent.futures.Future = concurrent.futures.Future()

        def done(fut: DeliveryFuture) -> None:
            exc = fut.exception()
            if exc is None:
                result.set_result(fut.result())
            else:
                result.set_exception(exc)

        async def send():
            fut = await self._runner.obj.send(topic, value, key, headers, partition, timestamp_ms)
            fut.add_done_callback(done)

        self._runner.call(send)
        return result

    def flush(self, timeout: float | None = None) -> None:
        self._runner.call(self._runner.obj.flush, timeout)


class SyncConsumer(_SyncFacade):
    """Consumer for synchronous code: ``poll(timeout)`` returns a list of ConsumerRecord."""

    def __init__(self, bootstrap_servers, config=None, *, on_assigned=None, on_revoked=None) -> None:
        self._runner = _TrioThread(
            lambda: Consumer(bootstrap_servers, config, on_assigned=on_assigned, on_revoked=on_revoked),
            "databus-consumer",
        )


class SyncShareConsumer(_SyncFacade):
    """Share consumer for synchronous code: ``poll(timeout)`` returns a list of
    ConsumerRecord (with ``delivery_count``); ``acknowledge(record, type)``, ``commit()``.
    Each call crosses into the trio thread, so acknowledging costs tens of µs a record."""

    def __init__(self, bootstrap_servers, config=None, *,
                 acknowledgement_commit_callback=None) -> None:
        self._runner = _TrioThread(
            lambda: ShareConsumer(bootstrap_servers, config,
                                  acknowledgement_commit_callback=acknowledgement_commit_callback),
            "databus-share-consumer",
        )


class SyncAdmin(_SyncFacade):
    """Admin client for synchronous code."""

    def __init__(self, bootstrap_servers, config=None) -> None:
        self._runner = _TrioThread(lambda: Admin(bootstrap_servers, config), "databus-admin")


class SyncRecordReader(_SyncFacade):
    """RecordReader for synchronous code: ``read(locations)`` blocks for the records."""

    def __init__(self, bootstrap_servers, config=None) -> None:
        self._runner = _TrioThread(lambda: RecordReader(bootstrap_servers, config),
                                   "databus-reader")
