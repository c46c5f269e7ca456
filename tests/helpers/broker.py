"""A real ``databus broker`` subprocess for tests (the class lives in databus.broker.process).

    from tests.helpers.broker import BrokerProcess

    with BrokerProcess(tmp_path, options={"num.partitions": 3}) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        ...
        broker.kill9()        # SIGKILL, like a crash (no flush, no clean-shutdown marker)
        broker.restart()      # kill -9 (or clean=True: SIGTERM), start again on the same
                              # port and data dir, wait until it listens
        broker.stop()         # SIGTERM: clean shutdown; returns the exit status

- Runs ``python -m databus.cli broker --data-dir ROOT/data --listen 127.0.0.1:0 -o k=v ...``
  with the test's interpreter, waits (up to ``start_timeout``) for its ready file
  (``ROOT/broker.ready``, databus/broker/launch.py) and takes the real port from it;
  ``.bootstrap`` is "127.0.0.1:PORT".  A restart asks for the same port, so clients holding
  the bootstrap address reconnect by themselves.  The broker stops by itself if the test
  process dies (its lifeline pipe closes).
- stderr is copied to ``ROOT/broker.log``; ``.log_text()`` reads it (put it in assertion
  messages), ``.pid`` / ``.alive()`` for process checks.
- The process is always killed when the ``with`` block exits, even when the test failed;
  without ``with``, call ``close()`` in a ``finally``.
- The ``broker`` fixture (tests/conftest.py) is a module-scoped instance for tests that only
  need "a broker" (use your own topic names); tests that kill, restart or configure a broker
  make their own BrokerProcess.
"""

from databus.broker.process import BrokerProcess, BrokerStartError

__all__ = ["BrokerProcess", "BrokerStartError"]
