"""The registry as a trio service inside ``databus broker``: the REST app (http.py) over the
Store (store.py) of the broker it runs in, served by h11_server.py (not hypercorn, which
the console uses: its per-request cost was most of a lookup by id's)."""

from __future__ import annotations

import logging
from functools import partial

import trio

log = logging.getLogger("databus.schemas")


async def serve_registry(broker, listen: str, *,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Read ``_schemas``, then serve on ``listen`` (HOST:PORT, port 0: a free one) until
    cancelled; ``task_status.started(url)`` once it accepts connections."""
    from .h11_server import serve
    from .http import create_app
    from .store import Store
    from .validation import Validator

    store = Store(broker)
    store.open()
    broker.schema_validator = Validator(store)
    max_body = max(int(broker.config.message_max_bytes), 1 << 20)
    auth = None
    if any(listener.sasl for listener in broker.config.listener_list()):
        from .auth import BasicAuth

        # security is on: the registry takes the broker's SASL users' logins (HTTP basic)
        auth = BasicAuth(broker.credentials.check_plain)
    app = create_app(store, max_body=max_body, auth=auth)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve, app, listen))
        log.info("schema registry on %s%s", url,
                 " (HTTP basic: the broker's SASL users)" if auth else "")
        task_status.started(url)
