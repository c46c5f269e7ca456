"""Confluent's Schema Registry REST API v1 as a Starlette app over the Store.

Every answer is ``application/vnd.schemaregistry.v1+json``; every error is Confluent's
``{"error_code", "message"}`` with its HTTP status (errors.py), including a body that is
not JSON (400), one too large (413), a path that does not exist (404) and a method it does
not take (405).  Request bodies are read whatever their content type (clients send
``application/vnd.schemaregistry.v1+json``, ``application/json`` or none).
"""

from __future__ import annotations

import json
import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import errors
from .formats import SCHEMA_TYPES
from .registry import parse_version

log = logging.getLogger("databus.schemas")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
DEFAULT_MAX_BODY = 8 << 20


def reply(body, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def create_app(store, *, max_body: int = DEFAULT_MAX_BODY, auth=None):
    """The ASGI app; ``auth``: a BasicAuth (auth.py) when requests must log in, else None."""

    async def body_of(request: Request):
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= max_body:
                chunks.append(chunk)
            elif size > 16 * max_body:
                break  # read on (below) so the client, still sending, gets the answer
        if size > max_body:
            raise errors.RegistryError(413, 413, f"Request body larger than {max_body} bytes")
        raw = b"".join(chunks)
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"Unrecognized request body: not JSON ({exc})") from None

    def endpoint(handler):
        async def wrapped(request: Request) -> Response:
            if auth is not None and await auth.user(request.headers.get("authorization")) \
                    is None:
                response = reply({"error_code": 40101, "message": "Unauthorized"}, 401)
                response.headers["WWW-Authenticate"] = 'Basic realm="databus schema registry"'
                return response
            try:
                return await handler(request, **request.path_params)
            except errors.RegistryError as exc:
                return reply(exc.body(), exc.status)
            except RecursionError:
                return reply({"error_code": 42201, "message": "Invalid schema: nested too "
                              "deeply"}, 422)
        return wrapped

    # -- subjects and versions ----------------------------------------------------------

    async def subjects(request):
        registry = store.read()
        return reply(registry.subject_names(_flag(request, "deleted"),
                                             request.query_params.get("subjectPrefix", "")))

    async def versions(request, subject):
        return reply(store.read().version_numbers(subject, _flag(request, "deleted")))

    async def register(request, subject):
        body = await body_of(request)
        normalize = _flag(request, "normalize")
        answer = await store.write(lambda r: r.plan_register(subject, body, normalize=normalize))
        return reply(answer)

    async def get_version(request, subject, version):
        found = store.read().get_version(subject, version, _flag(request, "deleted"))
        return reply(found.as_json())

    async def get_version_schema(request, subject, version):
        found = store.read().get_version(subject, version, _flag(request, "deleted"))
        return Response(found.schema, media_type=CONTENT_TYPE)

    async def referenced_by(request, subject, version):
        return reply(store.read().referenced_by(subject, version))

    async def delete_version(request, subject, version):
        permanent = _flag(request, "permanent")
        parse_version(version)
        answer = await store.write(
            lambda r: r.plan_delete_version(subject, version, permanent))
        return reply(answer)

    async def lookup(request, subject):
        body = await body_of(request)
        found = store.read().lookup(subject, body, deleted=_flag(request, "deleted"),
                                    normalize=_flag(request, "normalize"))
        return reply(found.as_json())

    async def delete_subject(request, subject):
        permanent = _flag(request, "permanent")
        return reply(await store.write(lambda r: r.plan_delete_subject(subject, permanent)))

    # -- schemas by id ------------------------------------------------------------------

    def _id(value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise errors.schema_not_found() from None

    async def schema_by_id(request, schema_id):
        registry = store.read()
        found = registry.schema_by_id(_id(schema_id), request.query_params.get("subject"))
        body = _schema_answer(found)
        if _flag(request, "fetchMaxId"):
            body["maxId"] = registry.max_id
        return reply(body)

    async def schema_text_by_id(request, schema_id):
        found = store.read().schema_by_id(_id(schema_id), request.query_params.get("subject"))
        return Response(found.schema, media_type=CONTENT_TYPE)

    async def subjects_by_id(request, schema_id):
        holders = store.read().versions_with_id(_id(schema_id), _flag(request, "deleted"))
        if not holders:
            raise errors.schema_not_found(_id(schema_id))
        return reply(sorted({v.subject for v in holders}))

    async def versions_by_id(request, schema_id):
        holders = store.read().versions_with_id(_id(schema_id), _flag(request, "deleted"))
        if not holders:
            raise errors.schema_not_found(_id(schema_id))
        return reply([{"subject": v.subject, "version": v.version} for v in holders])

    async def schema_types(request):
        return reply(list(SCHEMA_TYPES))

    async def all_schemas(request):
        registry = store.read()
        prefix = request.query_params.get("subjectPrefix", "")
        latest_only = _flag(request, "latestOnly")
        out = []
        for subject in registry.subject_names(_flag(request, "deleted"), prefix):
            numbers = registry.version_numbers(subject, _flag(request, "deleted"))
            for number in numbers[-1:] if latest_only else numbers:
                out.append(registry.get_version(subject, number, True).as_json())
        return reply(out)

    # -- compatibility ------------------------------------------------------------------

    async def compatibility(request, subject, version=None):
        body = await body_of(request)
        registry = store.read()
        if version is not None:
            parse_version(version)
        problems = registry.check(subject, body, version, _flag(request, "normalize"))
        answer: dict = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return reply(answer)

    # -- config and mode ----------------------------------------------------------------

    async def get_config(request, subject=None):
        registry = store.read()
        if subject is not None and subject not in registry.subject_levels:
            if not _flag(request, "defaultToGlobal"):
                raise errors.subject_config_not_found(subject)
        return reply({"compatibilityLevel": registry.level(subject)})

    async def put_config(request, subject=None):
        body = await body_of(request)
        if not isinstance(body, dict):
            raise errors.unprocessable("the request body must be a JSON object")
        return reply(await store.write(lambda r: r.plan_config(subject, body)))

    async def delete_config(request, subject=None):
        return reply(await store.write(lambda r: r.plan_delete_config(subject)))

    async def get_mode(request, subject=None):
        registry = store.read()
        if subject is not None and subject not in registry.subject_modes:
            if not _flag(request, "defaultToGlobal"):
                raise errors.subject_mode_not_found(subject)
        return reply({"mode": registry.mode(subject)})

    async def put_mode(request, subject=None):
        body = await body_of(request)
        if not isinstance(body, dict):
            raise errors.unprocessable("the request body must be a JSON object")
        force = _flag(request, "force")
        return reply(await store.write(lambda r: r.plan_mode(subject, body, force)))

    async def delete_mode(request, subject):
        return reply(await store.write(lambda r: r.plan_delete_mode(subject)))

    async def root(request):
        return reply({})

    def route(path, handler, methods):
        return Route(path, endpoint(handler), methods=methods)

    subject = "/subjects/{subject}"
    version = subject + "/versions/{version}"
    routes = [
        route("/", root, ["GET"]),
        route("/subjects", subjects, ["GET"]),
        route(subject, lookup, ["POST"]),
        route(subject, delete_subject, ["DELETE"]),
        route(subject + "/versions", versions, ["GET"]),
        route(subject + "/versions", register, ["POST"]),
        route(version, get_version, ["GET"]),
        route(version, delete_version, ["DELETE"]),
        route(version + "/schema", get_version_schema, ["GET"]),
        route(version + "/referencedby", referenced_by, ["GET"]),
        route("/schemas", all_schemas, ["GET"]),
        route("/schemas/types", schema_types, ["GET"]),
        route("/schemas/ids/{schema_id}", schema_by_id, ["GET"]),
        route("/schemas/ids/{schema_id}/schema", schema_text_by_id, ["GET"]),
        route("/schemas/ids/{schema_id}/subjects", subjects_by_id, ["GET"]),
        route("/schemas/ids/{schema_id}/versions", versions_by_id, ["GET"]),
        route("/compatibility/subjects/{subject}/versions", compatibility, ["POST"]),
        route("/compatibility/subjects/{subject}/versions/{version}", compatibility, ["POST"]),
        route("/config", get_config, ["GET"]),
        route("/config", put_config, ["PUT"]),
        route("/config", delete_config, ["DELETE"]),
        route("/config/{subject}", get_config, ["GET"]),
        route("/config/{subject}", put_config, ["PUT"]),
        route("/config/{subject}", delete_config, ["DELETE"]),
        route("/mode", get_mode, ["GET"]),
        route("/mode", put_mode, ["PUT"]),
        route("/mode/{subject}", get_mode, ["GET"]),
        route("/mode/{subject}", put_mode, ["PUT"]),
        route("/mode/{subject}", delete_mode, ["DELETE"]),
    ]

    async def http_error(request, exc: HTTPException) -> Response:
        names = {404: "Not Found", 405: "Method Not Allowed"}
        return reply({"error_code": exc.status_code,
                      "message": f"HTTP {exc.status_code} {names.get(exc.status_code, '')}"
                      .strip()}, exc.status_code)

    async def server_error(request, exc: Exception) -> Response:
        log.exception("schema registry: %s %s failed", request.method, request.url.path)
        return reply({"error_code": 50001, "message": f"Error in the backend data store - "
                      f"{type(exc).__name__}"}, 500)

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error,
                                                      Exception: server_error})
    return _ids_fast_path(app, store, auth)


def _schema_answer(found) -> dict:
    body: dict = {}
    if found.schema_type != "AVRO":
        body["schemaType"] = found.schema_type
    if found.references:
        body["references"] = found.references_json()
    body["schema"] = found.schema
    return body


_IDS = "/schemas/ids/"
_HEADERS = [(b"content-type", CONTENT_TYPE.encode())]


def _ids_fast_path(app, store, auth):
    """``GET /schemas/ids/{id}`` (what every deserializer asks once per id) answered from
    the encoded answer kept per id, in front of Starlette: routing, the Request and
    Response objects and json.dumps were most of a lookup's time in the broker's process.
    An id's schema never changes, but a permanent delete can take it away, so the answers
    are dropped whenever the ``_schemas`` log has moved on.  Anything else (a query string,
    an unknown id, a failed login) goes to the app, which answers as before."""
    answers: dict[str, bytes] = {}
    position = -1

    async def asgi(scope, receive, send):
        nonlocal position
        path = scope.get("path", "")
        if (scope["type"] == "http" and scope["method"] == "GET" and path.startswith(_IDS)
                and not scope.get("query_string") and path[len(_IDS):].isascii()
                and path[len(_IDS):].isdigit()):
            try:
                registry = store.read()
            except errors.RegistryError:  # the app answers it in Confluent's format
                return await app(scope, receive, send)
            if store.position != position:
                answers.clear()
                position = store.position
            body = answers.get(path)
            if body is None:
                holders = registry.versions_with_id(int(path[len(_IDS):]), deleted=True)
                if holders:
                    body = answers[path] = json.dumps(_schema_answer(holders[0])).encode()
            if body is not None and (auth is None or await auth.user(
                    dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
                    or None) is not None):
                await send({"type": "http.response.start", "status": 200,
                            "headers": [*_HEADERS, (b"content-length", b"%d" % len(body))]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return asgi
