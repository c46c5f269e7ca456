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
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .cluster import RESET_TARGETS, ClusterView, ConsoleError
from .view import chart, format_bytes, format_ms, show_bytes

HERE = Path(__file__).parent
REFRESH_SECONDS = 2  # how often a group's lag fragment reloads itself (htmx polling)
# The status page reads the clusters (a mirror's offset syncs) and the index databases:
# seldom enough not to load them while someone watches.
STATUS_REFRESH_SECONDS = 10


def create_app(view: ClusterView, *, read_only: bool = False, status=None) -> Starlette:
    """``status``: a server.ConfigStatus (the mirrors/indexes/sinks of a sidecar.yaml and
    index search), or None when the console was started without one."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.globals.update(read_only=read_only, bootstrap=view.bootstrap,
                       refresh_seconds=REFRESH_SECONDS,
                       status_refresh_seconds=STATUS_REFRESH_SECONDS, reset_targets=RESET_TARGETS)
    env.filters["show"] = show_bytes
    env.filters["ms"] = format_ms
    env.filters["bytes"] = format_bytes
    env.filters["q"] = lambda s: quote(str(s), safe="")

    def page(request: Request, name: str, status_code: int = 200, **context) -> Response:
        context.setdefault("done", request.query_params.get("done"))
        return templates.TemplateResponse(request, name, context, status_code=status_code)

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

    async def cluster_page(request: Request) -> Response:
        try:
            overview = await view.overview()
        except ConsoleError as exc:
            return failure(request, exc)
        return page(request, "cluster.html", overview=overview)

    async def topic_page(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            partitions = await view.topic(name)
        except ConsoleError as exc:
            return failure(request, exc, 404)
        return page(request, "topic.html", topic=name, partitions=partitions)

    async def messages_fragment(request: Request) -> Response:
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

    async def groups_page(request: Request) -> Response:
        try:
            groups = await view.groups()
        except ConsoleError as exc:
            return failure(request, exc)
        return page(request, "groups.html", groups=groups)

    async def group_context(group: str) -> dict:
        doc = await view.group(group)
        return {"group": group, "doc": doc,
                "chart": chart(view.samples.series(("group", group))),
                "topics": sorted({o["topic"] for o in doc["offsets"]})}

    async def group_page(request: Request) -> Response:
        try:
            context = await group_context(request.path_params["group"])
        except ConsoleError as exc:
            return failure(request, exc, 404)
        return page(request, "group.html", **context)

    async def lag_fragment(request: Request) -> Response:
        try:
            context = await group_context(request.path_params["group"])
        except ConsoleError as exc:
            return failure(request, exc)
        return page(request, "_lag.html", **context)

    async def status_page(request: Request) -> Response:
        if status is None:
            return page(request, "status.html", tables=None)
        try:
            tables = await status.tables()
        except (ConsoleError, OSError) as exc:
            return failure(request, exc)
        return page(request, "status.html", tables=tables, indexes=status.indexes)

    async def index_search(request: Request) -> Response:
        q = request.query_params
        try:
            if status is None:
                raise ConsoleError("no sidecar.yaml: no indexes to search")
            records = await status.search(request.path_params["name"], q.get("field", ""),
                                          q.get("value", ""),
                                          limit=_int(q.get("limit"), "limit") or 20)
        except ConsoleError as exc:
            return failure(request, exc, 400)
        return page(request, "_messages.html", records=records)

    # -- actions ------------------------------------------------------------------------

    async def action(request: Request) -> Response:
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
            return await handler(request, form, form.get("confirmed") == "yes")
        except ConsoleError as exc:
            return failure(request, exc, 400)

    def confirm(request: Request, form: dict, title: str, lines: list[str], **extra) -> Response:
        return page(request, "confirm.html", title=title, lines=lines,
                    fields={k: v for k, v in form.items() if k != "confirmed"},
                    action=request.url.path, **extra)

    def done(url: str, message: str) -> Response:
        sep = "&" if "?" in url else "?"
        return RedirectResponse(f"{url}{sep}{urlencode({'done': message})}", status_code=303)

    async def create_topic(request, form, confirmed):
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

    async def delete_topic(request, form, confirmed):
        name = form.get("name") or ""
        if not confirmed:
            return confirm(request, form, "Delete topic",
                           [f"delete topic {name!r} and every message in it"], danger=True)
        await view.delete_topic(name)
        return done("/", f"deleted topic {name}")

    async def produce(request, form, confirmed):
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

    async def reset_offsets(request, form, confirmed):
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

    routes = [
        Route("/", cluster_page),
        Route("/topics/{name}", topic_page),
        Route("/topics/{name}/messages", messages_fragment),
        Route("/groups", groups_page),
        Route("/groups/{group}", group_page),
        Route("/groups/{group}/lag", lag_fragment),
        Route("/status", status_page),
        Route("/indexes/{name}/search", index_search),
        Route("/actions/{kind}", action, methods=["POST"]),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes)


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
