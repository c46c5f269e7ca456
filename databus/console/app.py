"""The console's web application: Starlette routes over a ClusterView, Jinja templates.

Rules every action follows (creating and deleting topics, producing, resetting offsets):

* POST only, and only from the console's own pages: a request any other page sends (a
  ``Sec-Fetch-Site`` other than same-origin, or an ``Origin`` that is not this host) is
  refused.
* Two steps: the first POST shows what would happen (for a reset, the plan: each partition's
  current and new offset) and a Confirm button; only the second POST, carrying
  ``confirmed=yes``, acts.  Nothing is changed by a GET.
* ``read_only``: every action is refused with 403 before anything is asked of the cluster,
  and the pages show no forms.

With ``sessions`` (login mode, sessions.py) every page and action first needs a live
session's cookie, and uses that session's view (the user's own credentials); ``/login``
and ``/logout`` are POSTs under the same cross-site rule as the actions.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .client_metrics import read_metrics
from .cluster import RESET_TARGETS, ClusterView, ConsoleError, LoginRefused, LoginThrottled
from .schemas import SchemaPageError, SchemaPages
from .sessions import COOKIE, Sessions
from .view import chart, format_bytes, format_ms, show_bytes

HERE = Path(__file__).parent
REFRESH_SECONDS = 2  # how often a group's lag fragment reloads itself (htmx polling)
# The status page reads the clusters (a mirror's offset syncs) and the index databases:
# seldom enough not to load them while someone watches.
STATUS_REFRESH_SECONDS = 10


def create_app(shared: ClusterView | None, *, read_only: bool = False, status=None,
               sessions: Sessions | None = None, schema_registry: str | None = None,
               broker_metrics: str | None = None) -> Starlette:
    """``shared``: the view every request uses; or ``sessions`` (login mode, shared None):
    each request uses its session's view, and without one gets the login page.
    ``status``: a server.ConfigStatus (the mirrors/indexes/sinks of a sidecar.yaml and
    index search), or None when the console was started without one.  ``schema_registry``:
    the registry the schema pages read (schemas.py).  ``broker_metrics``: the broker's
    /metrics URL the Clients page reads (client_metrics.py), or None."""
    schemas = SchemaPages(schema_registry)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    if shared is not None:
        bootstrap = shared.bootstrap
    elif sessions is not None:
        bootstrap = sessions.bootstrap
    else:
        raise TypeError("create_app: give the shared view or the sessions (login mode)")
    env.globals.update(read_only=read_only, bootstrap=bootstrap, login=sessions is not None,
                       refresh_seconds=REFRESH_SECONDS,
                       status_refresh_seconds=STATUS_REFRESH_SECONDS, reset_targets=RESET_TARGETS)
    env.filters["show"] = show_bytes
    env.filters["ms"] = format_ms
    env.filters["bytes"] = format_bytes
    env.filters["q"] = lambda s: quote(str(s), safe="")

    def page(request: Request, name: str, status_code: int = 200, **context) -> Response:
        context.setdefault("done", request.query_params.get("done"))
        view = getattr(request.state, "view", None)
        context.setdefault("user", view.user if view is not None else None)
        response = templates.TemplateResponse(request, name, context, status_code=status_code)
        if sessions is not None:
            # What a user saw is theirs: not kept for the back button after a logout.
            response.headers["Cache-Control"] = "no-store"
        return response

    def failure(request: Request, exc: Exception, status_code: int = 502) -> Response:
        headers = request.headers
        if headers.get("hx-request"):
            if headers.get("hx-target") and headers.get("hx-target") == headers.get("hx-trigger"):
                # A part of a page reloading itself (lag, topics): 204 makes htmx keep what
                # it shows and keep polling, so the page recovers when the cluster answers.
                return Response(status_code=204)
            # A form's answer (messages, index search): the reason, where the answer goes.
            return HTMLResponse(f'<p class="error">{_escape(str(exc))}</p>', status_code=200)
        return page(request, "error.html", status_code, message=str(exc))

    async def cluster_page(request: Request, view: ClusterView) -> Response:
        try:
            overview = await view.overview()
        except ConsoleError as exc:
            return failure(request, exc)
        # Internal topics (databus.internal_topics) are listed only with ?internal=1.
        return page(request, "cluster.html", overview=overview,
                    show_internal=request.query_params.get("internal") == "1")

    async def topic_page(request: Request, view: ClusterView) -> Response:
        name = request.path_params["name"]
        try:
            partitions = await view.topic(name)
        except ConsoleError as exc:
            return failure(request, exc, 404)
        return page(request, "topic.html", topic=name, partitions=partitions)

    async def messages_fragment(request: Request, view: ClusterView) -> Response:
        name, q = request.path_params["name"], request.query_params
        try:
            records = await view.browse(
                name, mode=q.get("mode", "newest"),
                partition=_int(q.get("partition"), "partition"),
                offset=_int(q.get("offset"), "offset"), since=q.get("since") or None,
                limit=_int(q.get("limit"), "limit") or 20)
        except ConsoleError as exc:
            return failure(request, exc, 400)
        return page(request, "_messages.html", records=records, topic=name)

    async def clients_page(request: Request, view: ClusterView) -> Response:
        if broker_metrics is None:
            return page(request, "clients.html", url=None)
        try:
            metrics = await run_in_threadpool(read_metrics, broker_metrics)
        except (OSError, ValueError) as exc:
            return page(request, "clients.html", status_code=502, url=broker_metrics,
                        error=str(exc))
        return page(request, "clients.html", url=broker_metrics, view=metrics, error=None)

    async def groups_page(request: Request, view: ClusterView) -> Response:
        try:
            groups = await view.groups()
        except ConsoleError as exc:
            return failure(request, exc)
        return page(request, "groups.html", groups=groups)

    async def group_context(view: ClusterView, group: str) -> dict:
        doc = await view.group(group)
        return {"group": group, "doc": doc,
                "chart": chart(view.samples.series(("group", group))),
                "topics": sorted({o["topic"] for o in doc["offsets"]})}

    async def group_page(request: Request, view: ClusterView) -> Response:
        try:
            context = await group_context(view, request.path_params["group"])
        except ConsoleError as exc:
            return failure(request, exc, 404)
        return page(request, "group.html", **context)

    async def lag_fragment(request: Request, view: ClusterView) -> Response:
        try:
            context = await group_context(view, request.path_params["group"])
        except ConsoleError as exc:
            return failure(request, exc)
        return page(request, "_lag.html", **context)

    async def status_page(request: Request, view: ClusterView) -> Response:
        if status is None:
            return page(request, "status.html", tables=None)
        try:
            tables = await status.tables(view)
        except (ConsoleError, OSError) as exc:
            return failure(request, exc)
        return page(request, "status.html", tables=tables, indexes=status.indexes)

    async def index_search(request: Request, view: ClusterView) -> Response:
        q = request.query_params
        try:
            if status is None:
                raise ConsoleError("no sidecar.yaml: no indexes to search")
            records = await status.search(view, request.path_params["name"],
                                          q.get("field", ""), q.get("value", ""),
                                          limit=_int(q.get("limit"), "limit") or 20)
        except ConsoleError as exc:
            return failure(request, exc, 400)
        return page(request, "_messages.html", records=records)

    async def schemas_page(request: Request, view: ClusterView) -> Response:
        try:
            found = await run_in_threadpool(schemas.subjects)
        except SchemaPageError as exc:
            return failure(request, exc)
        return page(request, "schemas.html", **found)

    async def schema_page(request: Request, view: ClusterView) -> Response:
        try:
            found = await run_in_threadpool(schemas.subject, request.path_params["subject"],
                                            request.query_params.get("version"))
        except SchemaPageError as exc:
            return failure(request, exc, 404 if "404" in str(exc) else 502)
        return page(request, "schema.html", **found)

    # -- actions ------------------------------------------------------------------------

    async def action(request: Request, view: ClusterView) -> Response:
        kind = request.path_params["kind"]
        if read_only:
            return page(request, "error.html", 403, refused=True,
                        message=f"read-only console: {kind} refused")
        if not _same_origin(request):
            return PlainTextResponse("cross-site request refused\n", status_code=403)
        handler = ACTIONS.get(kind)
        if handler is None:
            return PlainTextResponse(f"no action {kind!r}\n", status_code=404)
        form = dict(await request.form())
        try:
            return await handler(request, view, form, form.get("confirmed") == "yes")
        except ConsoleError as exc:
            return failure(request, exc, 400)

    def confirm(request: Request, form: dict, title: str, lines: list[str], **extra) -> Response:
        return page(request, "confirm.html", title=title, lines=lines,
                    fields={k: v for k, v in form.items() if k != "confirmed"},
                    action=request.url.path, **extra)

    def done(url: str, message: str) -> Response:
        sep = "&" if "?" in url else "?"
        return RedirectResponse(f"{url}{sep}{urlencode({'done': message})}", status_code=303)

    async def create_topic(request, view, form, confirmed):
        name = (form.get("name") or "").strip()
        if not name:
            raise ConsoleError("a topic needs a name")
        partitions = _int(form.get("partitions"), "partitions") or -1
        configs = {}
        for key in ("retention.ms", "cleanup.policy"):
            if (form.get(key) or "").strip():
                configs[key] = form[key].strip()
        if not confirmed:
            lines = [f"create topic {name!r} with "
                     + (f"{partitions} partition(s)" if partitions > 0
                        else "the broker's num.partitions")]
            lines += [f"{k}={v}" for k, v in configs.items()]
            return confirm(request, form, "Create topic", lines)
        await view.create_topic(name, partitions, configs)
        return done(f"/topics/{quote(name, safe='')}", f"created topic {name}")

    async def delete_topic(request, view, form, confirmed):
        name = form.get("name") or ""
        if not confirmed:
            return confirm(request, form, "Delete topic",
                           [f"delete topic {name!r} and every message in it"], danger=True)
        await view.delete_topic(name)
        return done("/", f"deleted topic {name}")

    async def produce(request, view, form, confirmed):
        topic = form.get("topic") or ""
        partition = _int(form.get("partition"), "partition")
        key = (form.get("key") or "").encode() or None
        value = (form.get("value") or "").encode()
        headers = _headers(form.get("headers") or "")
        if not confirmed:
            where = f"partition {partition}" if partition is not None else "the partitioner's choice"
            return confirm(request, form, "Produce a message",
                           [f"send {len(value)} byte(s) to {topic!r} ({where})",
                            f"key: {key.decode() if key else 'null'}",
                            f"headers: {', '.join(k for k, _ in headers) or 'none'}"])
        meta = await view.produce(topic, value, key, headers, partition)
        return done(f"/topics/{quote(topic, safe='')}",
                    f"produced to partition {meta.partition} at offset {meta.offset}")

    async def reset_offsets(request, view, form, confirmed):
        group = form.get("group") or ""
        topic = form.get("topic") or None
        target = form.get("target") or ""
        rows, plan = await view.plan_reset(group, topic, target, form.get("value"))
        if not confirmed:
            return confirm(request, form, f"Reset the offsets of group {group!r}",
                           [f"to {target}" + (f" {form.get('value')}" if form.get("value")
                                              else "")],
                           plan=rows, danger=True)
        await view.execute_reset(group, plan)
        return done(f"/groups/{quote(group, safe='')}",
                    f"committed {len(rows)} offset(s) for group {group}")

    ACTIONS = {"create-topic": create_topic, "delete-topic": delete_topic,
               "produce": produce, "reset-offsets": reset_offsets}

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    # -- login (sessions given: console.auth sasl) ---------------------------------------

    def viewing(handler):
        """``handler(request, view)`` with the request's view: the console's own, or with a
        login the view of the request's session; without a live session, the login page."""
        async def endpoint(request: Request) -> Response:
            if sessions is None:
                found = shared
            else:
                found = sessions.find(request.cookies.get(COOKIE))
                if found is None:
                    return login_required(request)
            request.state.view = found
            return await handler(request, found)
        return endpoint

    def login_required(request: Request) -> Response:
        if request.headers.get("hx-request"):
            # A part of a page reloading itself: htmx loads the login page in its place.
            return Response(headers={"HX-Redirect": "/login"})
        where = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        target = f"/login?{urlencode({'next': where})}" if request.method == "GET" else "/login"
        return RedirectResponse(target, status_code=303)

    def login_routes(sessions: Sessions) -> list[Route]:
        """/login and /logout: routes of login mode only (``sessions`` given)."""
        async def login_page(request: Request) -> Response:
            if request.method == "GET":
                if sessions.find(request.cookies.get(COOKIE)) is not None:
                    return RedirectResponse("/", status_code=303)
                return page(request, "login.html", next=_local(request.query_params.get("next")))
            if not _same_origin(request):
                return PlainTextResponse("cross-site request refused\n", status_code=403)
            form = await request.form()
            username, next_url = str(form.get("username") or ""), _local(form.get("next"))
            try:
                token = await sessions.login(username, str(form.get("password") or ""),
                                             request.client.host if request.client else None)
            except ConsoleError as exc:  # LoginRefused: "invalid username or password"
                status_code = (401 if isinstance(exc, LoginRefused)
                               else 429 if isinstance(exc, LoginThrottled) else 503)
                answer = page(request, "login.html", status_code, error=str(exc),
                              username=username, next=next_url)
                if isinstance(exc, LoginThrottled):
                    answer.headers["Retry-After"] = str(exc.retry_after)
                return answer
            response = RedirectResponse(next_url, status_code=303)
            response.set_cookie(COOKIE, token, path="/", httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
            return response

        async def logout(request: Request) -> Response:
            if not _same_origin(request):
                return PlainTextResponse("cross-site request refused\n", status_code=403)
            sessions.logout(request.cookies.get(COOKIE))
            response = RedirectResponse("/login", status_code=303)
            response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
            return response

        return [Route("/login", login_page, methods=["GET", "POST"]),
                Route("/logout", logout, methods=["POST"])]

    routes = [
        Route("/", viewing(cluster_page)),
        Route("/topics/{name}", viewing(topic_page)),
        Route("/topics/{name}/messages", viewing(messages_fragment)),
        Route("/groups", viewing(groups_page)),
        Route("/clients", viewing(clients_page)),
        Route("/groups/{group}", viewing(group_page)),
        Route("/groups/{group}/lag", viewing(lag_fragment)),
        Route("/status", viewing(status_page)),
        Route("/schemas", viewing(schemas_page)),
        Route("/schemas/{subject}", viewing(schema_page)),
        Route("/indexes/{name}/search", viewing(index_search)),
        Route("/actions/{kind}", viewing(action), methods=["POST"]),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    if sessions is not None:
        routes += login_routes(sessions)
    return Starlette(routes=routes)


def _local(url) -> str:
    """Where a login goes on to: a path of this console, never another site's address."""
    url = str(url or "")
    if not url.startswith("/") or url.startswith(("//", "/\\")):
        return "/"
    return url


def _int(text: str | None, what: str) -> int | None:
    if text is None or not str(text).strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise ConsoleError(f"{what}: {text!r} is not an integer") from None


def _headers(text: str) -> list[tuple[str, bytes]]:
    """``key=value`` lines (the produce form's headers box)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ConsoleError(f"header {line!r}: expected name=value")
        out.append((name.strip(), value.encode()))
    return out


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin and origin != "null":
        return origin.split("://", 1)[-1] == request.headers.get("host")
    return True


def _escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))
