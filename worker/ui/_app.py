"""The Starlette application: routes, the login, templates and the error pages.

Every page is a GET over the store (nothing writes); store calls run in the thread pool. A
failure shows a reason code (a store code, ``BAD_QUERY``, ``NOT_FOUND``, ``INTERNAL_ERROR``)
and logs the code and the exception class, never its text.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from worker.canonical_json import canonical_json, thaw
from worker.reporting import STATUSES
from worker.store import Store, StoreError

from ._access import COOKIE, Access
from ._pages import NUMBERS_TTL_S, Numbers, record_view, result_list
from ._query import (
    SCOPE_KEYS,
    BadQuery,
    before_cursor,
    page_size,
    query_string,
    record_scope,
    result_filter,
)

__all__ = ["create_app"]

_log = logging.getLogger("evalq.ui")
_HERE = Path(__file__).parent
_LOGIN_BODY_BYTES = 4096
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Page = Callable[[Request], Awaitable[Response]]


def _json(value: Any) -> str:
    return canonical_json(thaw(value))


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # every value is HTML-escaped, whatever a trace holds
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["json"] = _json
    env.filters["percent"] = _percent
    return env


class _Ui:
    """The routes of one server over one store."""

    def __init__(self, store: Store, access: Access) -> None:
        self.store = store
        self.access = access
        self.numbers = Numbers(store)
        self.env = _environment()

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("store_location", self.store.location)
        context.setdefault("open_access", self.access.open)
        context.setdefault("numbers_ttl_s", NUMBERS_TTL_S)
        html = self.env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status_code, headers=_HEADERS)

    def failure(self, code: str, status_code: int) -> HTMLResponse:
        return self.render("error.html", status_code, code=code)

    def guarded(self, page: Page) -> Page:
        """Login required; failures become a reason-code page."""

        async def run(request: Request) -> Response:
            if not self.access.allows(request):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login{query_string({'next': target}, ('next',))}", 303)
            try:
                return await page(request)
            except BadQuery as exc:
                return self.render("error.html", 400, code=f"BAD_QUERY {exc.field} {exc.code}")
            except StoreError as exc:
                _log.warning("ui: store read failed (%s)", exc.code)
                return self.failure(exc.code, 503)
            except Exception as exc:  # noqa: BLE001 - a page fails alone, with a code
                _log.error("ui: page failed (INTERNAL_ERROR, %s)", type(exc).__name__)
                return self.failure("INTERNAL_ERROR", 500)

        return run

    async def overview(self, request: Request) -> Response:
        params = dict(request.query_params)
        scope = record_scope(params)
        numbers = await run_in_threadpool(self.numbers.get, scope)
        scope_query = query_string(params, SCOPE_KEYS)
        return self.render(
            "overview.html",
            view=numbers,
            params=params,
            scope_query=scope_query,
            keys_scope=SCOPE_KEYS,
            q=query_string,
        )

    async def metric(self, request: Request) -> Response:
        params = dict(request.query_params)
        metric_id = request.path_params["metric_id"]
        chosen = result_filter(metric_id, params)
        scope = record_scope(params)
        page = (before_cursor(params), page_size(params))
        listing = await run_in_threadpool(
            result_list, self.store, self.numbers, chosen, scope, page
        )
        return self.render(
            "metric.html",
            listing=listing,
            chosen=chosen,
            params=params,
            statuses=STATUSES,
            scope_query=query_string(params, SCOPE_KEYS),
            keys=(*SCOPE_KEYS, "status", "reason", "passed", "limit"),
            q=query_string,
        )

    async def record(self, request: Request) -> Response:
        evaluation_id = request.path_params["evaluation_id"]
        view = await run_in_threadpool(record_view, self.store, evaluation_id)
        if view is None:
            return self.failure("NOT_FOUND", 404)
        return self.render("record.html", view=view, focus=request.query_params.get("metric"))

    async def login_form(self, request: Request) -> Response:
        return self.render("login.html", next=_safe_next(request.query_params.get("next")))

    async def login(self, request: Request) -> Response:
        body = await _small_body(request)
        form = parse_qs(body.decode("utf-8", "replace")) if body is not None else {}
        given = (form.get("token") or [""])[0]
        target = _safe_next((form.get("next") or [""])[0])
        if self.access.open:
            return RedirectResponse(target, 303)
        if not self.access.token_matches(given):
            _log.info("ui: login refused (BAD_TOKEN)")
            return self.render("login.html", 401, next=target, refused=True)
        response = RedirectResponse(target, 303)
        response.set_cookie(
            COOKIE, self.access.session_value(), httponly=True, samesite="strict", path="/"
        )
        return response

    async def stylesheet(self, _request: Request) -> Response:
        css = (_HERE / "templates" / "ui.css").read_text(encoding="utf-8")
        return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})


async def _small_body(request: Request) -> bytes | None:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _LOGIN_BODY_BYTES:
            return None
    return body


def _safe_next(target: str | None) -> str:
    """Only a path of this server (no scheme, no host, no ``//``): no open redirect.

    Whitespace and control characters are refused too: browsers drop tabs and newlines from
    URLs, so ``/<tab>/host`` would become ``//host``.
    """
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    if "\\" in target or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in target):
        return "/"
    return target


def create_app(store: Store, access: Access) -> Starlette:
    """The browser over ``store`` (read-only), protected as ``access`` says."""
    ui = _Ui(store, access)
    routes = [
        Route("/", ui.guarded(ui.overview)),
        Route("/metrics/{metric_id:str}", ui.guarded(ui.metric)),
        Route("/records/{evaluation_id:str}", ui.guarded(ui.record)),
        Route("/login", ui.login_form, methods=["GET"]),
        Route("/login", ui.login, methods=["POST"]),
        Route("/ui.css", ui.stylesheet),
    ]
    return Starlette(routes=routes)
