"""``GET /index/NAME?FIELD=VALUE[&since=T][&until=T][&limit=N]`` on the metrics listener of
the process running the index (``databus sinks``): the same messages as ``databus index
query --json``, as one JSON object ``{"index", "field", "value", "messages": [...]}``.
Errors are JSON too (``{"error": ...}``): 404 for an unknown index or field (listing the
known ones), 400 for bad parameters."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import trio

from databus.config import DatabusConfig

from .command import parse_time, record_json
from .query import IndexQueryError, bootstrap_for, fetch, lookup, security_for

PREFIX = "/index/"
_JSON = "application/json"


def index_route(current_config: Callable[[], DatabusConfig], bootstrap: str | None):
    """The route for ``serve_http``; ``current_config()`` is the configuration in force."""

    async def route(path: str, params: dict[str, list[str]]) -> tuple[str, str, bytes]:
        name = path.removeprefix(PREFIX).strip("/")
        try:
            since = parse_time(_one(params, "since"), int(time.time() * 1000))
            until = parse_time(_one(params, "until"), int(time.time() * 1000))
            limit = int(_one(params, "limit") or 100)
            fields = {k: v for k, v in params.items() if k not in ("since", "until", "limit")}
            if len(fields) != 1:
                raise ValueError("give exactly one FIELD=VALUE parameter "
                                 "(besides since, until, limit)")
            (field, values), = fields.items()
            if len(values) != 1:
                raise ValueError(f"{field} is given {len(values)} times")
            config = current_config()
            locations = await trio.to_thread.run_sync(
                lambda: lookup(config, name, field, values[0], since=since, until=until,
                               limit=limit))
            records = await fetch(bootstrap_for(config, name, bootstrap), locations,
                                  security_for(config, name, bootstrap))
        except (IndexQueryError, FileNotFoundError) as exc:
            return "404 Not Found", _JSON, _error(exc)
        except ValueError as exc:
            return "400 Bad Request", _JSON, _error(exc)
        body = {"index": name, "field": field, "value": values[0],
                "messages": [record_json(r) for r in records if r is not None]}
        return "200 OK", _JSON, json.dumps(body, ensure_ascii=False).encode()

    return route


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def _error(exc: Exception) -> bytes:
    return json.dumps({"error": str(exc)}).encode() + b"\n"
