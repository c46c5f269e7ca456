"""``GET /index/NAME?FIELD=VALUE[&since=T][&until=T][&limit=N]`` on the metrics listener of
the process running the index (``databus sinks``, ``databus up``): the same messages as
``databus index query --json``, as one JSON object ``{"index", "field", "value",
"messages": [...]}``; the queries share one cluster connection (``IndexQueries``).
Errors are JSON too (``{"error": ...}``): 404 for an unknown index or field (listing the
known ones), 400 for bad parameters, 503 when the cluster cannot give the messages."""

from __future__ import annotations

import json
import logging
import time

from databus.client import KafkaError

from .command import parse_time, record_json
from .query import IndexQueries, IndexQueryError

log = logging.getLogger("databus_plugins.index")

PREFIX = "/index/"
_JSON = "application/json"


def index_route(queries: IndexQueries):
    """The route for ``serve_http`` (``queries.serve`` running)."""

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
            records = await queries.query(name, field, values[0], since=since, until=until,
                                          limit=limit)
        except (IndexQueryError, FileNotFoundError) as exc:
            return "404 Not Found", _JSON, _error(exc)
        except ValueError as exc:
            return "400 Bad Request", _JSON, _error(exc)
        except KafkaError as exc:  # the cluster cannot give the messages now
            return "503 Service Unavailable", _JSON, _error(exc)
        except Exception as exc:  # (a damaged database...): this query fails, not the listener
            log.exception("GET %s failed", path)
            return "500 Internal Server Error", _JSON, _error(exc)
        body = {"index": name, "field": field, "value": values[0],
                "messages": [record_json(r) for r in records]}
        return "200 OK", _JSON, json.dumps(body, ensure_ascii=False).encode()

    return route


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def _error(exc: Exception) -> bytes:
    return json.dumps({"error": str(exc)}).encode() + b"\n"
